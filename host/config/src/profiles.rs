//! The shipped profiles, embedded from `profiles/NAME.toml`.

/// `(name, TOML text)` of each shipped profile.
pub(crate) const SHIPPED: &[(&str, &str)] = &[
    ("anthropic", include_str!("../../../profiles/anthropic.toml")),
    ("code", include_str!("../../../profiles/code.toml")),
    ("default", include_str!("../../../profiles/default.toml")),
    ("demo", include_str!("../../../profiles/demo.toml")),
    ("demo-deepseek", include_str!("../../../profiles/demo-deepseek.toml")),
    ("guarded", include_str!("../../../profiles/guarded.toml")),
    ("openai", include_str!("../../../profiles/openai.toml")),
    ("polyglot", include_str!("../../../profiles/polyglot.toml")),
];
