//! Fixture: a component of WASI 0.3-style `async` functions built with
//! `wit-bindgen`'s async support, knowing nothing of Wharf
//! (`tests/generic/async/wit/streams.wit`). Each streaming function returns
//! its stream's read end at once and writes the other end from a task of its
//! own, as a real component would.

// The generated bindings carry no doc comments of their own.
#![allow(missing_docs)]

wit_bindgen::generate!({ path: "../../generic/async/wit", world: "streams" });

use exports::example::streams::jobs::Guest;
use wit_bindgen::{FutureReader, StreamReader};

struct Fixture;

impl Guest for Fixture {
    async fn slow_add(a: u32, b: u32) -> u32 {
        wit_bindgen::yield_async().await;
        a.wrapping_add(b)
    }

    async fn count(n: u32) -> StreamReader<u8> {
        let (mut tx, rx) = wit_stream::new::<u8>();
        wit_bindgen::spawn_local(async move {
            for i in 1..=n {
                if !tx.write_all(format!("{i}\n").into_bytes()).await.is_empty() {
                    return;
                }
            }
        });
        rx
    }

    async fn words(text: String) -> StreamReader<String> {
        let (mut tx, rx) = wit_stream::new::<String>();
        wit_bindgen::spawn_local(async move {
            for w in text.split_whitespace() {
                if tx.write_one(format!("{w} ")).await.is_some() {
                    return;
                }
            }
        });
        rx
    }

    async fn chunks(n: u32, size: u32) -> StreamReader<Vec<u8>> {
        let (mut tx, rx) = wit_stream::new::<Vec<u8>>();
        wit_bindgen::spawn_local(async move {
            for _ in 0..n {
                let chunk: Vec<u8> = std::iter::repeat_n(b'x', size as usize).chain([b'\n']).collect();
                if tx.write_one(chunk).await.is_some() {
                    return;
                }
            }
        });
        rx
    }

    async fn later(name: String) -> FutureReader<String> {
        let (tx, rx) = wit_future::new::<String>(String::new);
        wit_bindgen::spawn_local(async move {
            wit_bindgen::yield_async().await;
            let _ = tx.write(format!("Hello, {name}!")).await;
        });
        rx
    }

    async fn forever(interval_ms: u32) -> StreamReader<u8> {
        let (mut tx, rx) = wit_stream::new::<u8>();
        wit_bindgen::spawn_local(async move {
            let mut i = 0u64;
            loop {
                i += 1;
                if !tx.write_all(format!("tick {i}\n").into_bytes()).await.is_empty() {
                    return;
                }
                // A blocking WASI 0.2 sleep: the whole instance waits.
                std::thread::sleep(std::time::Duration::from_millis(u64::from(interval_ms)));
            }
        });
        rx
    }
}

export!(Fixture);
