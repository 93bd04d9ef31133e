-- Wharf session store, schema 1: sessions with their lease, events keyed by
-- (session id, seq), and the shared inbox.

CREATE TABLE wharf_sessions (
    id            text PRIMARY KEY,
    -- Seq of the last committed event (0 before the header).
    last_seq      bigint NOT NULL DEFAULT 0,
    -- Size of the log in its JSONL form (each event's text plus a newline).
    bytes         bigint NOT NULL DEFAULT 0,
    -- First user message among the first 64 events, for listings.
    title         text,
    -- The lease: the fencing token grows by one on every acquisition.
    lease_token   bigint NOT NULL DEFAULT 0,
    lease_holder  text,
    -- NULL: released; in the past: expired (anyone may take it).
    lease_expires timestamptz
);

CREATE TABLE wharf_events (
    session_id text   NOT NULL REFERENCES wharf_sessions (id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    -- The event's JSON line exactly as the core encoded it.
    body       text   NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE wharf_inbox (
    id         bigserial PRIMARY KEY,
    session_id text        NOT NULL REFERENCES wharf_sessions (id) ON DELETE CASCADE,
    kind       text        NOT NULL,
    body       text        NOT NULL,
    created    timestamptz NOT NULL DEFAULT now(),
    delivered  timestamptz
);
CREATE INDEX wharf_inbox_pending ON wharf_inbox (session_id, id) WHERE delivered IS NULL;

-- Appends a batch of consecutive events if and only if p_token is the
-- session's current fencing token. Returns 'ok', 'fenced', 'missing', 'gap'
-- (the log does not end at p_first - 1) or 'diverged' (different events are
-- already stored at these seqs). A batch already stored byte for byte (a
-- retried append whose first attempt committed) is 'ok'. Renews the lease.
CREATE FUNCTION wharf_append(p_id text, p_token bigint, p_holder text, p_ttl_ms bigint, p_first bigint,
                             p_bodies text[], p_bytes bigint, p_title text, p_durable boolean)
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
    PERFORM pg_notify('wharf_events', p_id || ' ' || (p_first + n - 1));
    RETURN 'ok';
END $$;

-- Renews the lease while p_token is current (also an expired one nobody
-- took over). With p_durable the commit waits for the WAL flush, which also
-- makes every earlier asynchronous append of this server durable.
CREATE FUNCTION wharf_renew(p_id text, p_token bigint, p_holder text, p_ttl_ms bigint, p_durable boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF NOT p_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    UPDATE wharf_sessions
       SET lease_holder = p_holder, lease_expires = now() + p_ttl_ms * interval '1 millisecond'
     WHERE id = p_id AND lease_token = p_token;
    RETURN FOUND;
END $$;
