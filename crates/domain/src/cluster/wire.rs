//! How openraft's messages travel between nodes: encoded with bincode (serde) into the one
//! `bytes` field of `tapedeck.cluster.v1.Payload`.
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::pb::cluster::Payload;

/// `value` as a payload.
pub(super) fn encode<T: Serialize>(value: &T) -> Result<Payload, bincode::error::EncodeError> {
    let payload = bincode::serde::encode_to_vec(value, bincode::config::standard())?;
    Ok(Payload { payload })
}

/// The value `payload` carries.
pub(super) fn decode<T: DeserializeOwned>(
    payload: &Payload,
) -> Result<T, bincode::error::DecodeError> {
    let (value, _) =
        bincode::serde::decode_from_slice(&payload.payload, bincode::config::standard())?;
    Ok(value)
}
