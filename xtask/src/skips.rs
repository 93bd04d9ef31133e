//! The skip summary of `cargo xtask test`.
//!
//! A test that cannot run what it is about (a missing toolchain, browser,
//! namespace support, OS sandbox) calls `wharf_tests::skip`, which appends
//! `WHARF-SKIP <test>: <reason>` to the file named by `WHARF_SKIP_FILE`
//! (an expected absence, like a real provider's API key, is
//! `WHARF-SKIP-OPTIONAL …`). libtest captures a passing test's output, so
//! the lines are collected through that file rather than from the output;
//! `cargo xtask test` sets it, and prints every line at the end — also when
//! tests failed. With `CI` set, a (non-optional) skip is a failure: the test
//! itself panics, and the summary makes `cargo xtask test` fail too.

use std::path::Path;

/// The marker of a skip (as `wharf_tests::SKIP_MARKER`).
const MARKER: &str = "WHARF-SKIP";
/// The marker of an expected skip (as `wharf_tests::OPTIONAL_SKIP_MARKER`).
const OPTIONAL_MARKER: &str = "WHARF-SKIP-OPTIONAL";

/// One skipped test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skip {
    pub(crate) test: String,
    pub(crate) reason: String,
    /// Expected even in CI (never a failure).
    pub(crate) optional: bool,
}

/// The skips in `text` (one marker line each; other lines are ignored),
/// each test once, in the order first seen.
pub(crate) fn parse(text: &str) -> Vec<Skip> {
    let mut out: Vec<Skip> = Vec::new();
    for line in text.lines() {
        let (optional, rest) = if let Some(r) = line.strip_prefix(OPTIONAL_MARKER) {
            (true, r)
        } else if let Some(r) = line.strip_prefix(MARKER) {
            (false, r)
        } else {
            continue;
        };
        let Some(rest) = rest.strip_prefix(' ') else { continue };
        let (test, reason) = rest.split_once(": ").unwrap_or((rest, ""));
        let skip = Skip { test: test.trim().to_string(), reason: reason.trim().to_string(), optional };
        if !out.iter().any(|s| s.test == skip.test && s.reason == skip.reason) {
            out.push(skip);
        }
    }
    out
}

/// The summary to print, and whether it is a failure (`ci` and a skip that
/// is not optional).
pub(crate) fn summary(skips: &[Skip], ci: bool) -> (String, bool) {
    if skips.is_empty() {
        return ("== skipped tests: none ==\n".to_string(), false);
    }
    let required = skips.iter().filter(|s| !s.optional).count();
    let mut out = format!("== skipped tests: {} ==\n", skips.len());
    for s in skips {
        let tag = if s.optional { " (optional)" } else { "" };
        out.push_str(&format!("  {}{tag}: {}\n", s.test, s.reason));
    }
    let fail = ci && required > 0;
    if fail {
        out.push_str(&format!("CI is set: {required} skipped test(s) count as failures\n"));
    } else if required > 0 {
        out.push_str("(with CI set these are failures; .ci/run installs what they need)\n");
    }
    (out, fail)
}

/// Reads the skip file (missing: no skips).
pub(crate) fn read(path: &Path) -> Vec<Skip> {
    parse(&std::fs::read_to_string(path).unwrap_or_default())
}

/// Whether `CI` is set to anything but the empty string.
pub(crate) fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINES: &str = "\
WHARF-SKIP web::browser_prompt_stream_approve_result_and_cancel: chromium or node is not installed
noise WHARF-SKIP not: at the start
WHARF-SKIP-OPTIONAL llm::real_deepseek_api_when_a_key_is_set: DEEPSEEK_API_KEY is not set
WHARF-SKIP web::browser_prompt_stream_approve_result_and_cancel: chromium or node is not installed
WHARF-SKIPPED x: y
";

    #[test]
    fn parses_marker_lines_once_each() {
        let skips = parse(LINES);
        assert_eq!(
            skips,
            vec![
                Skip {
                    test: "web::browser_prompt_stream_approve_result_and_cancel".into(),
                    reason: "chromium or node is not installed".into(),
                    optional: false,
                },
                Skip {
                    test: "llm::real_deepseek_api_when_a_key_is_set".into(),
                    reason: "DEEPSEEK_API_KEY is not set".into(),
                    optional: true,
                },
            ]
        );
    }

    #[test]
    fn the_summary_names_every_skip_and_fails_only_under_ci() {
        let skips = parse(LINES);
        let (text, fail) = summary(&skips, false);
        assert!(!fail);
        assert!(text.contains("== skipped tests: 2 =="), "{text}");
        assert!(text.contains("  web::browser_prompt_stream_approve_result_and_cancel: chromium or node"), "{text}");
        assert!(text.contains("  llm::real_deepseek_api_when_a_key_is_set (optional): DEEPSEEK_API_KEY"), "{text}");
        let (text, fail) = summary(&skips, true);
        assert!(fail && text.contains("CI is set: 1 skipped test(s) count as failures"), "{text}");
        // An optional skip alone is never a failure.
        assert!(!summary(&skips[1..], true).1);
        assert_eq!(summary(&[], true), ("== skipped tests: none ==\n".to_string(), false));
    }
}
