//! PostgreSQL backend of the session-log store: events, leases with fencing, inbox and LISTEN/NOTIFY fan-out.
