//! The Rust client against a running server: records a response chunk by chunk, then replays
//! it from a byte offset, as a page that reloaded would.
//!
//! ```sh
//! cargo run --release -- serve &
//! cargo run --example record_and_replay -- 127.0.0.1:9090
//! ```
use tapedeck::client::{Client, ClientConfig, RecordOptions};

#[tokio::main]
async fn main() -> Result<(), tonic::Status> {
    let server = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9090".into());
    let client = Client::connect(ClientConfig::new(server)).await?;

    let recording = client
        .record(b"example-chat", RecordOptions::default())
        .await?;
    for token in ["Hello", ", ", "world", "!"] {
        recording.send(token).await?; // waits when the server is behind
    }
    recording.complete().await?;

    // The reader had seen "Hello" (5 bytes) before it reloaded.
    let mut replay = client.replay(b"example-chat", 5).await?;
    while let Some(piece) = replay.next().await? {
        println!(
            "{:?} (resume from {} next time)",
            piece.content, piece.offset
        );
    }
    println!(
        "the recording ended as {}",
        replay.ended_as().unwrap_or("?")
    );
    Ok(())
}
