//! Where the locator finds Redis and how other instances reach this one; shown in logs with
//! any credentials in the Redis URL hidden.

/// Where the locator finds Redis and how other instances reach this one.
#[derive(Clone)]
pub struct LocatorConfig {
    /// `redis://[user:password@]host:port[/db]`.
    pub redis_url: String,
    /// `host:port` other instances redirect clients to.
    pub advertised_address: String,
    /// `host:port` of this instance's HTTP face, where other instances send HTTP requests
    /// about the streams it holds (`--advertised-http-address`); none: they answer 404.
    pub advertised_http_address: Option<String>,
}

impl LocatorConfig {
    /// The Redis URL with any credentials in it replaced by `***`, for logs.
    pub fn redacted_url(&self) -> String {
        match (
            self.redis_url.split_once("://"),
            self.redis_url.rsplit_once('@'),
        ) {
            (Some((scheme, _)), Some((_, host))) => format!("{scheme}://***@{host}"),
            _ => self.redis_url.clone(),
        }
    }
}

impl std::fmt::Debug for LocatorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocatorConfig")
            .field("redis_url", &self.redacted_url())
            .field("advertised_address", &self.advertised_address)
            .field("advertised_http_address", &self.advertised_http_address)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_redis_url_are_never_shown() {
        let config = LocatorConfig {
            redis_url: "redis://user:hunter2@10.0.0.5:6379/2".into(),
            advertised_address: "10.0.0.1:9090".into(),
            advertised_http_address: None,
        };
        assert_eq!(config.redacted_url(), "redis://***@10.0.0.5:6379/2");
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}
