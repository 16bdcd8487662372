//! Compiles the gRPC contract in `proto/` with protox (pure Rust, no system `protoc`), and keeps
//! the encoded descriptor set for server reflection.
use prost::Message;

const PROTOS: &[&str] = &[
    "proto/memory/v1/response_recorder.proto",
    "proto/memory/v1/response_resumer.proto",
    "proto/tapedeck/v1/recordings.proto",
    "proto/tapedeck/v1/cluster.proto",
    "proto/tapedeck/cluster/v1/cluster.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("memory_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
