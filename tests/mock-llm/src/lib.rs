//! Mock LLM server (placeholder).
