//! `serve`: forage's HTTP/JSON API (`crate::server`) on a unix socket, and
//! optionally a loopback TCP port with a bearer token, until a signal stops it.

use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::Ctx;
use crate::error::{Error, Result};
use crate::server::{listen, Config, Server};
use crate::service::call::Defaults;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The unix socket to listen on [default: $XDG_RUNTIME_DIR/forage/forage.sock,
    /// else FORAGE_HOME/serve/forage.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also listen on this loopback address (port 0: any free one); every
    /// request there needs `Authorization: Bearer TOKEN`
    #[arg(long, value_name = "ADDR:PORT")]
    tcp: Option<SocketAddr>,
    /// The token for --tcp, read from this file [default: a new one, written
    /// to FORAGE_HOME/serve/token, mode 0600]
    #[arg(long, value_name = "FILE", requires = "tcp")]
    token_file: Option<PathBuf>,
    /// A directory the workspaces of requests must lie under (repeatable)
    /// [default: your home directory]
    #[arg(long = "root", value_name = "DIR")]
    roots: Vec<PathBuf>,
    /// Tear a job's sandbox down once its agent exits, for job requests that
    /// do not say (`cleanup`); its context, branch and archives stay
    #[arg(long)]
    cleanup_on_complete: bool,
    /// Print the API's OpenAPI document and exit
    #[arg(long)]
    openapi: bool,
}

/// The most of a token file read.
const MAX_TOKEN: u64 = 4096;

pub async fn run(ctx: &Ctx, args: ServeArgs) -> Result<i32> {
    if args.openapi {
        ctx.out.json(&crate::server::openapi::document())?;
        return Ok(0);
    }
    ctx.no_json("serve", "serves until stopped")?;
    if let Some(addr) = args.tcp {
        listen::check_loopback(addr)?;
    }
    let roots = roots(ctx, &args.roots)?;
    let token = match (&args.tcp, &args.token_file) {
        (None, _) => None,
        (Some(_), Some(file)) => Some(read_token(file)?),
        (Some(_), None) => Some(new_token(&serve_dir(ctx)?.join("token"))?),
    };
    let path = match args.socket.clone() {
        Some(path) => path,
        None => default_socket(ctx)?,
    };
    let socket = listen::bind_socket(&path)?;
    let tcp = match args.tcp {
        Some(addr) => Some(listen::bind_tcp(addr).await?),
        None => None,
    };
    ctx.out.status(format!("serving forage's API on unix:{}", path.display()));
    if let Some(listener) = &tcp {
        let at = listener.local_addr().map_err(|e| Error::other(format!("the TCP port: {e}")))?;
        let from = args.token_file.clone().unwrap_or_else(|| ctx.home.root().join("serve/token"));
        ctx.out.status(format!("and on http://{at} (bearer token in {})", from.display()));
    }
    let defaults = Defaults { cleanup_on_complete: args.cleanup_on_complete };
    let config = Config { socket: Some(path), tcp: args.tcp, token, roots, defaults };
    let server = Server::new(ctx.engine().await?, config);
    ctx.cancel_on_signals();
    listen::serve(server, Some(&socket), tcp, ctx.cancel.clone()).await;
    Ok(0)
}

fn default_socket(ctx: &Ctx) -> Result<PathBuf> {
    match ctx.settings.xdg_runtime_dir.as_ref().filter(|d| d.is_absolute()) {
        Some(dir) => Ok(dir.join("forage/forage.sock")),
        None => Ok(serve_dir(ctx)?.join("forage.sock")),
    }
}

/// FORAGE_HOME/serve, the user's alone (made with FORAGE_HOME when missing).
fn serve_dir(ctx: &Ctx) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = ctx.home.root().join("serve");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Error::other(format!("making {}: {e}", dir.display())))?;
    Ok(dir)
}

/// The allowed roots, canonical: `--root`s, else the user's home.
fn roots(ctx: &Ctx, given: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let wanted: Vec<PathBuf> = if given.is_empty() {
        let home = ctx.settings.home.clone().ok_or_else(|| {
            Error::usage("HOME is not set, so `serve` has no default root; pass --root DIR for the directories workspaces may be under")
        })?;
        vec![home]
    } else {
        given.to_vec()
    };
    wanted
        .iter()
        .map(|dir| {
            dir.canonicalize()
                .map_err(|e| Error::usage(format!("--root {}: {e}; name an existing directory", dir.display())))
        })
        .collect()
}

fn read_token(file: &Path) -> Result<String> {
    let mut text = String::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(MAX_TOKEN).read_to_string(&mut text))
        .map_err(|e| Error::usage(format!("--token-file {}: {e}", file.display())))?;
    let token = text.trim();
    if token.len() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::usage(format!(
            "--token-file {}: a token is one word of at least 16 characters",
            file.display()
        )));
    }
    Ok(token.to_owned())
}

/// A new random token, written to `file` (mode 0600, replacing an older one).
fn new_token(file: &Path) -> Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::other(format!("reading /dev/urandom: {e}")))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let _ = std::fs::remove_file(file);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .map_err(|e| Error::other(format!("writing {}: {e}", file.display())))?;
    std::io::Write::write_all(&mut out, format!("{token}\n").as_bytes())
        .map_err(|e| Error::other(format!("writing {}: {e}", file.display())))?;
    Ok(token)
}
