//! `wharf-mock-llm SCRIPT.json` (or `-` for standard input): serves the
//! script on `127.0.0.1:0`, prints the base URL as the first line of
//! standard output, and runs until interrupted (SIGINT/SIGTERM). On exit it
//! prints the violations, if any, to standard error and exits 1 when there
//! were some (0 otherwise). Records are also available over HTTP at
//! `GET /_mock/requests` and `GET /_mock/violations`.

use std::io::{Read, Write};
use std::process::ExitCode;

use wharf_mock_llm::{MockError, MockLlm, Script};

fn read_script(path: &str) -> Result<Script, MockError> {
    let text = if path == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(path)?
    };
    Ok(serde_json::from_str(&text)?)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn run(script: Script) -> Result<usize, MockError> {
    let mock = MockLlm::start(script).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", mock.url())?;
        out.flush()?;
    }
    wait_for_signal().await;
    let violations = mock.violations();
    for v in &violations {
        eprintln!("violation: {v}");
    }
    mock.shutdown().await;
    Ok(violations.len())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path] = args.as_slice() else {
        eprintln!("usage: wharf-mock-llm SCRIPT.json   (or - for stdin)");
        return ExitCode::from(2);
    };
    let script = match read_script(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wharf-mock-llm: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wharf-mock-llm: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(script)) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("wharf-mock-llm: {e}");
            ExitCode::from(2)
        }
    }
}
