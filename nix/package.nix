# forage-ctl, built from this source tree with the dependencies pinned by Cargo.lock.
#
#   pkgs.callPackage ./nix/package.nix { }                         # or the flake's packages.default
#   pkgs.callPackage ./nix/package.nix { withJujutsu = false; }    # without jj on PATH
{
  lib,
  stdenv,
  rustPlatform,
  pkg-config,
  zlib,
  openssl,
  glibc,
  jujutsu,
  installShellFiles,
  makeBinaryWrapper,
  # `up --jj` drives the jj CLI; with this, the nixpkgs jj is appended to
  # forage-ctl's PATH, so one installed by the user still comes first.
  withJujutsu ? true,
}:

let
  cargoToml = lib.importTOML ../Cargo.toml;

  # Programs forage-ctl runs itself. `ldd` (glibc's bin output) tells which shared
  # libraries a host tool loads when a `host_image` template (the default `shell`)
  # builds its image offline; jj is needed for `--jj` only. git is not one of
  # them: forage links libgit2 (the git2 crate). It does copy the host's `git` into
  # the `shell` image when it finds one on PATH, which the NixOS module provides.
  runtimePrograms = [ (lib.getBin glibc) ] ++ lib.optional withJujutsu jujutsu;
in
rustPlatform.buildRustPackage {
  pname = cargoToml.package.name;
  inherit (cargoToml.package) version;

  # Only what the build reads: editing docs/ or nix/ does not rebuild forage-ctl.
  # tests/ is there because Cargo.toml declares the `it` test target.
  src = lib.fileset.toSource {
    root = ../.;
    fileset = lib.fileset.unions [
      ../Cargo.toml
      ../Cargo.lock
      ../src
      ../templates
      ../tests
    ];
  };

  cargoLock.lockFile = ../Cargo.lock;

  # git2 is used with only its `https` feature (jobs fetch https:// sources; no ssh,
  # so no libssh2): openssl-sys links the system OpenSSL found through pkg-config,
  # hence openssl in buildInputs. libgit2-sys then compiles the libgit2 sources bundled in the crate
  # with the `cc` crate (the stdenv's C compiler; no cmake). It would take a system
  # libgit2 found through pkg-config instead, but only one in the 1.9.7..1.10 range
  # its version pins, so libgit2 is deliberately not in buildInputs: the bundled
  # copy, fixed by Cargo.lock, is what `cargo build` uses everywhere else too.
  # libz-sys finds zlib through pkg-config (it would fall back to a bundled copy).
  nativeBuildInputs = [
    pkg-config
    installShellFiles
    makeBinaryWrapper
  ];
  buildInputs = [
    zlib
    openssl
  ];

  # The integration tests (tests/it) drive the real Docker engine and the real git
  # and jj; the build sandbox has neither a Docker daemon nor network, and they fail
  # (they never skip) without one. Only the unit tests of the library run here;
  # `cargo test` (CI's .ci/run) runs everything against a real engine.
  cargoTestFlags = [ "--lib" ];
  # A unit test asks ldd for the libraries of `ls`.
  nativeCheckInputs = [ (lib.getBin glibc) ];

  postInstall =
    lib.optionalString (stdenv.buildPlatform.canExecute stdenv.hostPlatform) ''
      installShellCompletion --cmd forage-ctl \
        --bash <($out/bin/forage-ctl completions bash) \
        --fish <($out/bin/forage-ctl completions fish) \
        --zsh <($out/bin/forage-ctl completions zsh)
      $out/bin/forage-ctl man > forage-ctl.1
      installManPage forage-ctl.1
    ''
    + ''
      wrapProgram $out/bin/forage-ctl \
        --suffix PATH : ${lib.makeBinPath runtimePrograms}
    '';

  meta = {
    description = "Run AI coding agents in Docker sandboxes: one container and one workspace per agent";
    longDescription = ''
      forage gives each AI coding agent its own Docker container and its own
      workspace (a directory, a git worktree on its own branch, or a jj workspace),
      and removes the sandbox again without losing the agent's work. It talks to the
      Docker Engine API directly and builds its default image offline from the
      host's own programs.
    '';
    license = with lib.licenses; [
      mit
      asl20
    ];
    mainProgram = "forage-ctl";
    platforms = lib.platforms.linux;
  };
}
