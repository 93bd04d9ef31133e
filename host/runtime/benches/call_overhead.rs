//! Per-call overhead of a trivial tool (`echo` from the `text` component):
//! the same work called natively, through a fresh sandbox per call, and
//! through a reused (warm) instance. Variants are interleaved in rounds so
//! machine noise hits them alike; results are medians and p99s in µs and
//! ratios measured in this one run.
//!
//! Run: `cargo xtask bench` (or `cargo bench -p wharf-runtime --profile dev
//! --bench call_overhead -- COMPONENT.wasm [OUT.json]`).

use std::time::Instant;

use serde_json::{Value, json};
use wharf_runtime::grants::Grant;
use wharf_runtime::{CallContext, PluginSpec, Runtime, RuntimeOptions};

fn native_echo(args: &str) -> Result<String, String> {
    let v: Value = serde_json::from_str(args).map_err(|e| e.to_string())?;
    v.get("text").and_then(Value::as_str).map(str::to_string).ok_or_else(|| "missing text".to_string())
}

fn stats(mut xs: Vec<f64>) -> (f64, f64) {
    xs.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| xs[((xs.len() as f64 - 1.0) * q).round() as usize];
    (pick(0.5), pick(0.99))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let component = args.first().cloned().unwrap_or_else(|| "target/plugins/text.wasm".into());
    let out_json = args.get(1).cloned();
    let rounds: usize = std::env::var("WHARF_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let per_round = 200;

    let rt = Runtime::new(RuntimeOptions {
        cache_dir: wharf_runtime::cache::CompileCache::default_dir(),
        ..Default::default()
    })?;
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let spec = |warm| PluginSpec {
        id: "text".into(),
        path: component.clone().into(),
        config: json!({}),
        grant: Grant::default(),
        warm,
    };
    let fresh = rt.load(&spec(false))?;
    let warm = rt.load(&spec(true))?;
    let ctx = CallContext { session_id: "bench".into(), call_id: "c".into(), workspace: None };
    let payload = json!({"text": "hello, wharf"}).to_string();

    let mut t_native = Vec::new();
    let mut t_fresh = Vec::new();
    let mut t_warm = Vec::new();
    tokio.block_on(async {
        // Warm-up: fill pooling slots and caches.
        for _ in 0..100 {
            let _ = fresh.call_tool("echo", &payload, &ctx).await;
            let _ = warm.call_tool("echo", &payload, &ctx).await;
        }
        for _ in 0..rounds {
            for _ in 0..per_round {
                let t = Instant::now();
                let r = native_echo(std::hint::black_box(&payload));
                t_native.push(t.elapsed().as_secs_f64() * 1e6);
                assert!(r.is_ok());
            }
            for _ in 0..per_round {
                let t = Instant::now();
                let r = fresh.call_tool("echo", &payload, &ctx).await;
                t_fresh.push(t.elapsed().as_secs_f64() * 1e6);
                assert!(matches!(r, Ok(ref o) if !o.is_error), "{r:?}");
            }
            for _ in 0..per_round {
                let t = Instant::now();
                let r = warm.call_tool("echo", &payload, &ctx).await;
                t_warm.push(t.elapsed().as_secs_f64() * 1e6);
                assert!(matches!(r, Ok(ref o) if !o.is_error), "{r:?}");
            }
        }
    });
    let (n50, n99) = stats(t_native);
    let (f50, f99) = stats(t_fresh);
    let (w50, w99) = stats(t_warm);
    println!("tool-call overhead, {} calls per variant, allocator: {}", rounds * per_round, rt.engine().allocator());
    println!("| variant | median µs | p99 µs | median vs native |");
    println!("| --- | ---: | ---: | ---: |");
    println!("| native function | {n50:.2} | {n99:.2} | 1.0× |");
    println!("| component, fresh instance per call | {f50:.2} | {f99:.2} | {:.0}× |", f50 / n50);
    println!("| component, warm instance | {w50:.2} | {w99:.2} | {:.0}× |", w50 / n50);
    println!("fresh / warm: {:.1}×", f50 / w50);
    if let Some(path) = &out_json {
        let md = format!(
            "allocator: {}; {} calls per variant, interleaved rounds\n\n| variant | median µs | p99 µs | median vs native | median vs warm |\n| --- | ---: | ---: | ---: | ---: |\n| native function | {n50:.2} | {n99:.2} | 1× | |\n| component, fresh instance per call | {f50:.2} | {f99:.2} | {:.0}× | {:.1}× |\n| component, warm instance | {w50:.2} | {w99:.2} | {:.0}× | 1× |\n",
            rt.engine().allocator(),
            rounds * per_round,
            f50 / n50,
            f50 / w50,
            w50 / n50
        );
        std::fs::write(std::path::Path::new(path).with_extension("md"), md)?;
    }
    if let Some(path) = out_json {
        let report = json!({
            "allocator": rt.engine().allocator().to_string(),
            "calls_per_variant": rounds * per_round,
            "native": {"median_us": n50, "p99_us": n99},
            "fresh": {"median_us": f50, "p99_us": f99},
            "warm": {"median_us": w50, "p99_us": w99},
        });
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
