-- Wharf session store, schema 3: one statement renews every lease a host
-- holds, instead of one round trip per session and interval (at a thousand
-- loaded sessions per host that was the database's largest load). Returns
-- the sessions whose lease the caller still holds; the others were taken
-- over (or deleted) and their writers are told so.

CREATE FUNCTION wharf_renew_many(p_ids text[], p_tokens bigint[], p_holder text, p_ttl_ms bigint)
RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    UPDATE wharf_sessions s
       SET lease_holder = p_holder, lease_expires = now() + p_ttl_ms * interval '1 millisecond'
      FROM unnest(p_ids, p_tokens) AS h(id, token)
     WHERE s.id = h.id AND s.lease_token = h.token
    RETURNING s.id;
END $$;
