-- Wharf session store, schema 2: the append that logs stored input
-- (`inbox/spliced`) marks it delivered in the same transaction, so input
-- sent through any host is logged exactly once, whenever its owner dies.
-- An index finds sessions whose lease expired (orphans to take over).

CREATE INDEX wharf_sessions_expiring ON wharf_sessions (lease_expires) WHERE lease_expires IS NOT NULL;

DROP FUNCTION wharf_append(text, bigint, text, bigint, bigint, text[], bigint, text, boolean);

-- As in schema 1, plus p_ack: inbox rows this batch logs, marked delivered.
CREATE FUNCTION wharf_append(p_id text, p_token bigint, p_holder text, p_ttl_ms bigint, p_first bigint,
                             p_bodies text[], p_bytes bigint, p_title text, p_durable boolean, p_ack bigint[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    s wharf_sessions%ROWTYPE;
    n bigint := coalesce(cardinality(p_bodies), 0);
BEGIN
    IF NOT p_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    SELECT * INTO s FROM wharf_sessions WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    IF s.lease_token <> p_token THEN
        RETURN 'fenced';
    END IF;
    IF s.last_seq >= p_first THEN
        IF s.last_seq >= p_first + n - 1 AND (
            SELECT array_agg(body ORDER BY seq) FROM wharf_events
            WHERE session_id = p_id AND seq BETWEEN p_first AND p_first + n - 1) = p_bodies THEN
            RETURN 'ok';
        END IF;
        RETURN 'diverged';
    END IF;
    IF s.last_seq <> p_first - 1 THEN
        RETURN 'gap';
    END IF;
    INSERT INTO wharf_events (session_id, seq, body)
        SELECT p_id, p_first + i - 1, p_bodies[i] FROM generate_subscripts(p_bodies, 1) AS i;
    UPDATE wharf_sessions
       SET last_seq = p_first + n - 1,
           bytes = bytes + p_bytes,
           title = coalesce(title, p_title),
           lease_holder = p_holder,
           lease_expires = now() + p_ttl_ms * interval '1 millisecond'
     WHERE id = p_id;
    IF coalesce(cardinality(p_ack), 0) > 0 THEN
        UPDATE wharf_inbox SET delivered = now()
         WHERE session_id = p_id AND id = ANY(p_ack) AND delivered IS NULL;
    END IF;
    PERFORM pg_notify('wharf_events', p_id || ' ' || (p_first + n - 1));
    RETURN 'ok';
END $$;
