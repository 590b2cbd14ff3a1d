//! An image as a `docker save` archive (manifest.json, the image config and
//! one layer), for engines whose import cannot set the image's config.
//!
//! Podman 4.3's compat import (`POST /images/create?fromSrc=-`) takes
//! `changes` as one value, so the `ENV`, `LABEL` and `CMD` that forage sends
//! (joined by newlines, as bollard does and Docker accepts) become one
//! environment variable: the labels are lost and PATH is corrupted. It also
//! ignores `tag` (the image is named `:latest`). Loading an
//! archive (`POST /images/load`) carries the config and the tag themselves.

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// What the image's config says besides its one layer.
pub struct ImageConfig<'a> {
    pub env: &'a [String],
    pub cmd: &'a [String],
    pub labels: &'a [(String, String)],
}

/// The archive of the image `reference` (`repo:tag`) whose one layer is `layer` (a tar).
pub fn archive(reference: &str, layer: &[u8], config: &ImageConfig<'_>) -> Result<Vec<u8>> {
    let diff_id = format!("sha256:{}", hex(&Sha256::digest(layer)));
    let labels: serde_json::Map<String, serde_json::Value> =
        config.labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let image_config = json!({
        "architecture": goarch(),
        "os": "linux",
        "config": {"Env": config.env, "Cmd": config.cmd, "Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "forage-ctl (host tools)"}],
    })
    .to_string();
    let config_name = format!("{}.json", hex(&Sha256::digest(image_config.as_bytes())));
    let manifest = json!([{"Config": config_name, "RepoTags": [reference], "Layers": ["layer.tar"]}]).to_string();

    let io = |e: std::io::Error| Error::other(format!("assembling the image archive: {e}"));
    let mut tar = tar::Builder::new(Vec::new());
    for (name, body) in
        [("manifest.json", manifest.as_bytes()), (config_name.as_str(), image_config.as_bytes()), ("layer.tar", layer)]
    {
        let mut header = tar::Header::new_gnu();
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name, body).map_err(io)?;
    }
    tar.into_inner().map_err(io)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The engine's name for this machine's architecture.
fn goarch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_names_the_tag_the_config_and_the_layer_by_its_digest() {
        let layer = b"not really a tar".to_vec();
        let config = ImageConfig {
            env: &["PATH=/usr/bin:/bin".into()],
            cmd: &["sh".into()],
            labels: &[("forage.image.key".into(), "abc".into())],
        };
        let bytes = archive("forage-host/shell:abc", &layer, &config).unwrap();
        let mut files = std::collections::BTreeMap::new();
        for entry in tar::Archive::new(bytes.as_slice()).entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut body = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut body).unwrap();
            files.insert(entry.path().unwrap().to_string_lossy().into_owned(), body);
        }
        let manifest: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
        assert_eq!(manifest[0]["RepoTags"], json!(["forage-host/shell:abc"]));
        let config: serde_json::Value =
            serde_json::from_slice(&files[manifest[0]["Config"].as_str().unwrap()]).unwrap();
        assert_eq!(config["config"]["Env"], json!(["PATH=/usr/bin:/bin"]), "each variable its own");
        assert_eq!(config["config"]["Labels"]["forage.image.key"], "abc");
        assert_eq!(config["rootfs"]["diff_ids"][0], format!("sha256:{}", hex(&Sha256::digest(&layer))));
        assert_eq!(files["layer.tar"], layer);
    }
}
