-- Wharf session store, schema 5: notifications only for watched sessions.
-- Every notification wakes each listening connection of every host, and the
-- hosts' listeners, although a session's own host streams its events to its
-- clients itself: on the load bench (2 hosts, ~10 group commits per turn)
-- that was about a sixth of the database's CPU. A host that streams a
-- session another host writes (`Backend::watch`) now registers the watch in
-- `wharf_watches` (renewed while it lasts, removed at its end, expiring if
-- the host dies), and `wharf_append_many` announces only the sessions with a
-- live watch. A host of an older version registers no watch: its watchers
-- fall back to their poll.

CREATE TABLE wharf_watches (
    session_id text NOT NULL,
    -- One row per watch: the host's holder name and a number of its own.
    watcher text NOT NULL,
    expires timestamptz NOT NULL,
    PRIMARY KEY (session_id, watcher)
);

-- wharf_append_many of schema 4, with the notification limited as above.
CREATE OR REPLACE FUNCTION wharf_append_many(p_ids text[], p_tokens bigint[], p_firsts bigint[], p_counts int[],
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
    watched text[];
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
    -- Looked up last, so a watch registered while this call ran is more
    -- likely seen; one that is not catches up at its next poll.
    SELECT array_agg(DISTINCT w.session_id) INTO watched FROM wharf_watches w
     WHERE w.session_id = ANY(p_ids) AND w.expires > now();
    IF watched IS NULL THEN
        RETURN st;
    END IF;
    FOR i IN 1..n LOOP
        IF is_new[i] AND p_ids[i] = ANY(watched) THEN
            pair := p_ids[i] || ' ' || (p_firsts[i] + coalesce(p_counts[i], 0) - 1);
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
    IF payload <> '' THEN
        PERFORM pg_notify('wharf_events', payload);
    END IF;
    RETURN st;
END $$;
