//! An async tool component: `jobs_count` streams its output line by line
//! (Wharf shows each line as the call's progress, the whole text is the
//! result), `jobs_later` answers through a future.

wit_bindgen::generate!({ path: "wit", world: "streams" });

use exports::example::streams::jobs::Guest;
use wit_bindgen::{FutureReader, StreamReader};

struct Jobs;

impl Guest for Jobs {
    async fn count(n: u32) -> StreamReader<u8> {
        let (mut tx, rx) = wit_stream::new::<u8>();
        // The read end goes back at once; this task writes the other end.
        wit_bindgen::spawn_local(async move {
            for i in 1..=n {
                // A non-empty remainder: the reader closed the stream.
                if !tx.write_all(format!("{i}\n").into_bytes()).await.is_empty() {
                    return;
                }
            }
        });
        rx
    }

    async fn later(name: String) -> FutureReader<String> {
        let (tx, rx) = wit_future::new::<String>(String::new);
        wit_bindgen::spawn_local(async move {
            let _ = tx.write(format!("Hello, {name}!")).await;
        });
        rx
    }
}

export!(Jobs);
