//! Tests of todo, skills, compaction and subagents end to end.
