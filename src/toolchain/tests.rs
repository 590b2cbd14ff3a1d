use super::*;

fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = t.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    t
}

#[test]
fn a_devcontainer_gives_image_env_commands_and_ports() {
    let t = repo(&[
        (
            ".devcontainer/devcontainer.json",
            r#"{
  // comments and trailing commas, as VS Code writes them
  "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"},},
  "containerEnv": {"A": "1", "HOME": "/x", "P": "${localEnv:HOME}"},
  "postCreateCommand": {"z": "echo z", "a": ["echo", "it's"]},
  "forwardPorts": [3000, "db:5432", true],
  "features": {"ghcr.io/devcontainers/features/node:1": {}},
  "initializeCommand": "touch /tmp/x",
  "runArgs": ["--privileged"],
}"#,
        ),
        (".devcontainer/Dockerfile", "FROM x\n"),
    ]);
    let r = read(t.path()).unwrap();
    let tc = r.toolchain.unwrap();
    assert_eq!(tc.to_string(), ".devcontainer/devcontainer.json (build .devcontainer/Dockerfile)");
    assert_eq!(
        tc.image,
        ProjectImage::Build {
            name: image_name(t.path()),
            context: t.path().to_path_buf(),
            dockerfile: ".devcontainer/Dockerfile".into(),
            args: BTreeMap::from([("V".into(), "1".into())])
        }
    );
    assert_eq!(tc.env, BTreeMap::from([("A".into(), "1".into())]));
    assert_eq!(tc.init, ["echo z", "'echo' 'it'\\''s'"], "in the order written");
    assert_eq!(tc.forward_ports, [ForwardPort::Port(3000), ForwardPort::Named("db:5432".into())]);
    let w = r.warnings.join("\n");
    for needle in [
        "initializeCommand (it would run on your machine)",
        "runArgs",
        "features are not supported",
        "HOME, P",
        "true is not a port",
    ] {
        assert!(w.contains(needle), "{needle:?} in {w}");
    }
}

#[test]
fn paths_leading_out_of_the_checkout_are_refused() {
    for (context, dockerfile, why) in [
        ("../..", "Dockerfile", "leads outside it"),
        ("/etc", "Dockerfile", "absolute path"),
        (".", "../../x/Dockerfile", "leads outside it"),
        ("link", "Dockerfile", "goes through the symlink .devcontainer/link"),
    ] {
        let t = repo(&[(
            ".devcontainer/devcontainer.json",
            &format!(r#"{{"build": {{"dockerfile": "{dockerfile}", "context": "{context}"}}}}"#),
        )]);
        std::os::unix::fs::symlink("/", t.path().join(".devcontainer/link")).unwrap();
        let e = read(t.path()).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains(why), "{context} {dockerfile}: {e}");
    }
}

#[test]
fn a_symlinked_file_is_not_followed() {
    let t = repo(&[("elsewhere.json", r#"{"image": "x"}"#)]);
    std::fs::create_dir(t.path().join(".devcontainer")).unwrap();
    std::os::unix::fs::symlink("../elsewhere.json", t.path().join(".devcontainer/devcontainer.json")).unwrap();
    let r = read(t.path()).unwrap();
    assert!(r.toolchain.is_none());
    assert!(r.warnings[0].contains("is a symlink"), "{:?}", r.warnings);
}

#[test]
fn the_forage_file_wins_and_may_not_ask_for_the_host() {
    let t = repo(&[
        (".forage/template.yaml", "image: rust:1\nenv: {A: b}\ninit: [make]\n"),
        (".devcontainer.json", r#"{"image": "node:22"}"#),
    ]);
    let tc = read(t.path()).unwrap().toolchain.unwrap();
    assert_eq!(tc.to_string(), ".forage/template.yaml (image rust:1)");
    assert_eq!(tc.init, ["make"]);
    std::fs::write(t.path().join(".forage/template.yaml"), "image: rust:1\nmounts: [{source: /, target: /h}]\n")
        .unwrap();
    let e = read(t.path()).unwrap_err().to_string();
    assert!(e.contains("`mounts` is not for a repository to set"), "{e}");
}
