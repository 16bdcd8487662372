//! `tapedeck token`: prints a signed grant (an HS256 JWT) for a user, as an agent app would
//! issue it.
use std::process::ExitCode;
use std::time::Duration;

use tapedeck::access::{Claims, Role, Secret};

use crate::values::{Period, parse_grant, parse_positive_duration};

/// The flags of `tapedeck token`.
#[derive(clap::Args)]
pub(crate) struct TokenArgs {
    /// The shared secret the server checks grants with (its --jwt-secret).
    #[arg(long, env = "TAPEDECK_JWT_SECRET", hide_env_values = true)]
    jwt_secret: String,
    /// Who the grant is for (`sub`).
    #[arg(long)]
    subject: String,
    /// A conversation and the role on it, `ID=reader` or `ID=writer`; `*=reader` for all
    /// (repeatable).
    #[arg(long = "conversation", value_name = "ID=ROLE", value_parser = parse_grant)]
    conversations: Vec<(String, Role)>,
    /// How long the grant is valid.
    #[arg(long, value_parser = parse_positive_duration, default_value = "15m")]
    ttl: Period,
    /// Issuer (`iss`), if the server checks one.
    #[arg(long)]
    issuer: Option<String>,
    /// Audience (`aud`), if the server checks one.
    #[arg(long)]
    audience: Option<String>,
}

/// Prints the grant `args` describe on stdout.
///
/// Fails with the usage error to print when the secret is unfit.
pub(crate) fn run(args: TokenArgs) -> Result<ExitCode, String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let secret = Secret::new(args.jwt_secret);
    if let Err(err) = secret.check_jwt_secret() {
        return Err(err.to_string());
    }
    let claims = Claims {
        sub: args.subject,
        exp: now.saturating_add(Duration::from(args.ttl).as_secs()),
        nbf: None,
        iss: args.issuer,
        aud: args.audience,
        conversations: args.conversations.into_iter().collect(),
    };
    match tapedeck::access::mint(&secret, &claims) {
        Ok(token) => {
            println!("{token}");
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("tapedeck: error: {err}");
            Ok(ExitCode::FAILURE)
        }
    }
}
