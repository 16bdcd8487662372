//! Compiles the gRPC contract in the repository's `proto/` with protox (pure Rust, no system `protoc`), and keeps
//! the encoded descriptor set for server reflection: the clients' services only, not the one
//! the nodes of a cluster speak among themselves.
use prost::Message;

/// The repository's `proto/`, from this crate's folder.
const ROOT: &str = "../../proto";
const PROTOS: &[&str] = &[
    "../../proto/memory/v1/response_recorder.proto",
    "../../proto/memory/v1/response_resumer.proto",
    "../../proto/tapedeck/v1/recordings.proto",
    "../../proto/tapedeck/v1/cluster.proto",
    "../../proto/tapedeck/cluster/v1/cluster.proto",
];
/// Served on the cluster port to the other nodes only: not for reflection.
const BETWEEN_NODES: &str = "tapedeck/cluster/v1/cluster.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let descriptors = protox::compile(PROTOS, [ROOT])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let mut reflected = descriptors.clone();
    reflected
        .file
        .retain(|file| file.name.as_deref() != Some(BETWEEN_NODES));
    std::fs::write(
        out_dir.join("memory_descriptor.bin"),
        reflected.encode_to_vec(),
    )?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    println!("cargo:rerun-if-changed={ROOT}");
    Ok(())
}
