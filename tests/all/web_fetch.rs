//! Tests of the web_fetch component against loopback servers.
