//! `wharf plugin pull|push|lock|sign`: components from OCI registries with
//! pinned digests and cosign-compatible signatures, over the `wharf-dist`
//! crate. (A profile row with a `source` is resolved when a host loads it:
//! `wharf_harness::resolve_row`.)

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use wharf_dist::registry::Registry;
use wharf_dist::{BlobStore, OciRef, lock, sign};

/// The OCI subcommands of `wharf plugin`.
#[derive(Subcommand, Debug)]
pub enum OciCommand {
    /// Pull a component from an OCI registry into the local store and print
    /// its digest and file.
    Pull {
        /// `oci://HOST/REPO:TAG` or `oci://HOST/REPO@sha256:…`.
        reference: String,
        /// Also require a cosign signature that verifies with this PEM
        /// public key.
        #[arg(long, value_name = "PATH.pub")]
        key: Option<PathBuf>,
    },
    /// Push a component file to an OCI registry (CNCF Wasm layout) and
    /// print its manifest digest.
    Push {
        /// The component (`.wasm`).
        file: PathBuf,
        /// `oci://HOST/REPO:TAG`.
        reference: String,
    },
    /// Write `digest = "sha256:…"` into the rows of a profile file that
    /// have an oci `source` and no `digest` (resolving each tag at the
    /// registry), keeping the file's formatting.
    Lock {
        /// The profile file (default: `.wharf/config.toml` of the
        /// workspace).
        #[arg(long, short = 'p', value_name = "FILE")]
        profile: Option<PathBuf>,
        /// The workspace (default: the current directory).
        #[arg(long, short = 'w')]
        workspace: Option<PathBuf>,
    },
    /// Sign a pushed component cosign-style (`sha256-<hex>.sig` tag) with a
    /// PEM P-256 private key, or make a key pair with `--generate-key`.
    Sign {
        /// `oci://HOST/REPO:TAG` or `…@sha256:…` (a tag is resolved first).
        #[arg(required_unless_present = "generate_key")]
        reference: Option<String>,
        /// The private key (PKCS#8 or SEC1 PEM, unencrypted).
        #[arg(long, value_name = "PATH", required_unless_present = "generate_key")]
        key: Option<PathBuf>,
        /// Write a new key pair: the private key to PATH (mode 0600) and
        /// the public key to PATH.pub; refuses to overwrite.
        #[arg(long, value_name = "PATH", conflicts_with_all = ["reference", "key"])]
        generate_key: Option<PathBuf>,
    },
}

/// Runs one OCI subcommand.
pub async fn run(cmd: OciCommand) -> Result<ExitCode> {
    match cmd {
        OciCommand::Pull { reference, key } => pull(&reference, key.as_deref()).await,
        OciCommand::Push { file, reference } => push(&file, &reference).await,
        OciCommand::Lock { profile, workspace } => lock_profile(profile, workspace).await,
        OciCommand::Sign { generate_key: Some(path), .. } => generate_key(&path),
        OciCommand::Sign { reference: Some(reference), key: Some(key), .. } => sign_ref(&reference, &key).await,
        OciCommand::Sign { .. } => bail!("give a reference and --key PATH, or --generate-key PATH"),
    }
}

async fn pull(reference: &str, key: Option<&Path>) -> Result<ExitCode> {
    let r = OciRef::parse(reference)?;
    let store = BlobStore::open_default()?;
    let key = key.map(sign::load_verifying_key).transpose()?;
    let digest = Registry::for_ref(&r).await?.fetch(&r, &store).await?;
    let resolved = wharf_dist::resolve(&store, &r.at_digest(&digest), None, key.as_ref()).await.inspect_err(|e| {
        tracing::error!("refused {r}: {e}");
    })?;
    println!(
        "{}",
        serde_json::json!({
            "reference": r.to_string(),
            "digest": resolved.manifest.to_string(),
            "layer": resolved.layer.to_string(),
            "path": resolved.path.display().to_string(),
            "verified": resolved.verified,
        })
    );
    Ok(ExitCode::SUCCESS)
}

async fn push(file: &Path, reference: &str) -> Result<ExitCode> {
    use std::io::Read;
    let r = OciRef::parse(reference)?;
    let f = std::fs::File::open(file).with_context(|| format!("open {}", file.display()))?;
    let mut bytes = Vec::new();
    f.take(wharf_dist::MAX_COMPONENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("read {}", file.display()))?;
    if bytes.len() as u64 > wharf_dist::MAX_COMPONENT_BYTES {
        bail!("{} is larger than {} bytes", file.display(), wharf_dist::MAX_COMPONENT_BYTES);
    }
    let store = BlobStore::open_default()?;
    let digest = Registry::for_ref(&r).await?.push_component(&r, &bytes, &store).await?;
    println!("{}", serde_json::json!({"reference": r.to_string(), "digest": digest.to_string()}));
    Ok(ExitCode::SUCCESS)
}

async fn lock_profile(profile: Option<PathBuf>, workspace: Option<PathBuf>) -> Result<ExitCode> {
    let path = match profile {
        Some(p) => p,
        None => workspace.unwrap_or_else(|| PathBuf::from(".")).join(".wharf").join("config.toml"),
    };
    let mut text = std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let rows = lock::unlocked(&text).with_context(|| path.display().to_string())?;
    if rows.is_empty() {
        eprintln!("{}: every row with a source has a digest", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let store = BlobStore::open_default()?;
    for row in rows {
        let r = OciRef::parse(&row.source).with_context(|| format!("{}: plugin `{}`", path.display(), row.id))?;
        let digest = match &r.digest {
            Some(d) => d.clone(),
            None => async { Registry::for_ref(&r).await?.fetch(&r, &store).await }
                .await
                .with_context(|| format!("plugin `{}`", row.id))?,
        };
        text = lock::set_digest(&text, &row.id, digest.as_str())?;
        println!("{}", serde_json::json!({"id": row.id, "source": row.source, "digest": digest.to_string()}));
    }
    write_replacing(&path, text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// Writes through a temp file and a rename (a reader never sees half a file).
fn write_replacing(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.lock-tmp", path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()));
    std::fs::write(&tmp, bytes).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replace {}", path.display()))
}

fn generate_key(path: &Path) -> Result<ExitCode> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let public_path = PathBuf::from(format!("{}.pub", path.display()));
    for p in [path, public_path.as_path()] {
        if p.exists() {
            bail!("{} exists; not overwriting a key", p.display());
        }
    }
    let (private, public) = sign::generate_key_pair()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    f.write_all(private.as_bytes()).with_context(|| format!("write {}", path.display()))?;
    std::fs::write(&public_path, public).with_context(|| format!("write {}", public_path.display()))?;
    println!(
        "{}",
        serde_json::json!({"private": path.display().to_string(), "public": public_path.display().to_string()})
    );
    Ok(ExitCode::SUCCESS)
}

async fn sign_ref(reference: &str, key: &Path) -> Result<ExitCode> {
    let r = OciRef::parse(reference)?;
    let key = sign::load_signing_key(key)?;
    let store = BlobStore::open_default()?;
    let registry = Registry::for_ref(&r).await?;
    // What is signed is the manifest digest the registry serves.
    let digest = registry.fetch(&r, &store).await?;
    let payload = sign::payload(&r.repo(), &digest);
    let signature = sign::sign(&key, &payload);
    registry.push_signature(&r, &digest, &payload, &signature, &store).await?;
    println!("{}", serde_json::json!({"digest": digest.to_string(), "signature": r.signature_of(&digest).to_string()}));
    Ok(ExitCode::SUCCESS)
}
