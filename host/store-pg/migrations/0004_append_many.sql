-- Wharf session store, schema 4: group commit. One call appends the
-- batches of many sessions in one transaction, instead of one transaction
-- (and one notification) per session and batch: at hundreds of busy
-- sessions per host the per-transaction cost was the database's load.
--
-- Batch i is session p_ids[i] under fencing token p_tokens[i], events
-- p_firsts[i] .. p_firsts[i] + p_counts[i] - 1 whose bodies are the next
-- p_counts[i] elements of p_bodies (the batches' bodies one after the
-- other), p_bytes[i] and p_titles[i] as in wharf_append, and the next
-- p_ack_counts[i] elements of p_acks: inbox rows it logs, marked delivered.
-- Returns one status per batch, in order, each exactly wharf_append's for
-- that batch alone: 'ok', 'fenced', 'missing', 'gap' or 'diverged' (a batch
-- already stored byte for byte, a retried call whose first attempt
-- committed, is 'ok'). A bad status is returned, never raised: it writes
-- nothing of that batch and does not abort the others.
--
-- Session rows are locked in id (byte) order, so two hosts' calls cannot
-- deadlock on them. The caller puts at most one batch per session in a
-- call (a repeated id is handled in order, but a retry of a batch of the
-- same call would be 'diverged'). Wakes listeners with one notification of
-- "id last_seq" lines per ~7900 bytes (the payload limit is 8000).

CREATE FUNCTION wharf_append_many(p_ids text[], p_tokens bigint[], p_firsts bigint[], p_counts int[],
                                  p_bodies text[], p_bytes bigint[], p_titles text[],
                                  p_ack_counts int[], p_acks bigint[],
                                  p_holder text, p_ttl_ms bigint, p_durable boolean)
RETURNS text[] LANGUAGE plpgsql
-- Plans that do not depend on the arrays' values: planning each call anew
-- (custom plans) cost more than the whole append of a small group.
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n int := coalesce(cardinality(p_ids), 0);
    st text[] := array_fill('missing'::text, ARRAY[n]);
    is_new boolean[] := array_fill(false, ARRAY[n]);
    -- Where batch i's bodies and acks start in p_bodies and p_acks, minus one.
    body_at int[] := array_fill(0, ARRAY[n]);
    ack_at int[] := array_fill(0, ARRAY[n]);
    -- The locked sessions: id, last seq (advanced as batches are taken), token.
    l_ids text[] := '{}';
    l_last bigint[] := '{}';
    l_token bigint[] := '{}';
    s record;
    i int;
    k int;
    cnt int;
    off int := 0;
    aoff int := 0;
    any_new boolean := false;
    pair text;
    payload text := '';
BEGIN
    IF n = 0 THEN
        RETURN st;
    END IF;
    IF NOT p_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    -- One lock order for every caller (byte order, as the hosts sort the
    -- leases they renew): no deadlock between hosts.
    FOR s IN SELECT id, last_seq, lease_token FROM wharf_sessions WHERE id = ANY(p_ids)
              ORDER BY id COLLATE "C" FOR UPDATE LOOP
        l_ids := l_ids || s.id;
        l_last := l_last || s.last_seq;
        l_token := l_token || s.lease_token;
    END LOOP;
    FOR i IN 1..n LOOP
        cnt := coalesce(p_counts[i], 0);
        body_at[i] := off;
        ack_at[i] := aoff;
        off := off + cnt;
        aoff := aoff + coalesce(p_ack_counts[i], 0);
        k := array_position(l_ids, p_ids[i]);
        IF k IS NULL THEN
            st[i] := 'missing';
        ELSIF l_token[k] <> p_tokens[i] THEN
            st[i] := 'fenced';
        ELSIF l_last[k] >= p_firsts[i] THEN
            IF l_last[k] >= p_firsts[i] + cnt - 1 AND (
                SELECT array_agg(body ORDER BY seq) FROM wharf_events
                 WHERE session_id = p_ids[i] AND seq BETWEEN p_firsts[i] AND p_firsts[i] + cnt - 1)
               IS NOT DISTINCT FROM p_bodies[body_at[i] + 1 : body_at[i] + cnt] AND cnt > 0 THEN
                st[i] := 'ok';
            ELSE
                st[i] := 'diverged';
            END IF;
        ELSIF l_last[k] <> p_firsts[i] - 1 THEN
            st[i] := 'gap';
        ELSE
            st[i] := 'ok';
            is_new[i] := true;
            any_new := true;
            l_last[k] := p_firsts[i] + cnt - 1;
            IF coalesce(p_ack_counts[i], 0) > 0 THEN
                UPDATE wharf_inbox SET delivered = now()
                 WHERE session_id = p_ids[i] AND delivered IS NULL
                   AND id = ANY(p_acks[ack_at[i] + 1 : ack_at[i] + p_ack_counts[i]]);
            END IF;
            pair := p_ids[i] || ' ' || l_last[k];
            IF payload = '' THEN
                payload := pair;
            ELSIF octet_length(payload) + 1 + octet_length(pair) > 7900 THEN
                PERFORM pg_notify('wharf_events', payload);
                payload := pair;
            ELSE
                payload := payload || E'\n' || pair;
            END IF;
        END IF;
    END LOOP;
    IF NOT any_new THEN
        RETURN st;
    END IF;
    INSERT INTO wharf_events (session_id, seq, body)
        SELECT p_ids[b], p_firsts[b] + j, p_bodies[body_at[b] + j + 1]
          FROM generate_subscripts(p_ids, 1) AS b, generate_series(0, p_counts[b] - 1) AS j
         WHERE is_new[b];
    UPDATE wharf_sessions w
       SET last_seq = u.new_last,
           bytes = w.bytes + u.add_bytes,
           title = coalesce(w.title, u.new_title),
           lease_holder = p_holder,
           lease_expires = now() + p_ttl_ms * interval '1 millisecond'
      FROM (SELECT p_ids[b] AS sid,
                   max(p_firsts[b] + p_counts[b] - 1) AS new_last,
                   sum(p_bytes[b])::bigint AS add_bytes,
                   (array_agg(p_titles[b] ORDER BY b) FILTER (WHERE p_titles[b] IS NOT NULL))[1] AS new_title
              FROM generate_subscripts(p_ids, 1) AS b
             WHERE is_new[b]
             GROUP BY 1) u
     WHERE w.id = u.sid AND w.id = ANY(p_ids);
    PERFORM pg_notify('wharf_events', payload);
    RETURN st;
END $$;
