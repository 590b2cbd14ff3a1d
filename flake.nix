{
  description = "forage: run AI coding agents in Docker sandboxes, one container and one workspace per agent";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      # forage drives the Docker engine of a Linux host.
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in
    {
      packages = forAllSystems (pkgs: {
        forage = pkgs.callPackage ./nix/package.nix { };
        default = self.packages.${pkgs.stdenv.hostPlatform.system}.forage;
      });

      overlays.default = final: _prev: {
        forage = final.callPackage ./nix/package.nix { };
      };

      # services.forage; see docs/nixos.md. Its package defaults to
      # pkgs.callPackage ./nix/package.nix { }, the same derivation as packages.default.
      nixosModules.default = {
        imports = [ ./nix/module.nix ];
      };
      nixosModules.forage = self.nixosModules.default;

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          # cargo, rustc, pkg-config and zlib, as the package builds with them.
          inputsFrom = [ self.packages.${pkgs.stdenv.hostPlatform.system}.forage ];
          packages = with pkgs; [
            clippy
            rustfmt
            rust-analyzer
            jujutsu
            git
            docker-client
          ];
          RUST_SRC_PATH = "${pkgs.rustPlatform.rustLibSrc}";
        };
      });

      checks = forAllSystems (
        pkgs:
        let
          system = pkgs.stdenv.hostPlatform.system;
        in
        {
          # The build runs the unit tests (not the Docker integration tests).
          package = self.packages.${system}.forage;

          # nix/lib.nix against its expected output, as .ci/run checks it offline.
          nix-lib =
            pkgs.runCommand "forage-nix-lib-test"
              {
                nativeBuildInputs = [ pkgs.jq ];
                actual = builtins.toJSON (import ./nix/tests/lib-test.nix);
                passAsFile = [ "actual" ];
              }
              ''
                jq -S . ${./nix/tests/expected.json} > expected.json
                jq -S . "$actualPath" > actual.json
                diff -u expected.json actual.json
                touch $out
              '';

          # A NixOS VM with the module enabled and declared sandboxes, started and
          # stopped through systemd.
          vm = import ./nix/tests/vm.nix {
            inherit pkgs;
            module = self.nixosModules.default;
          };
        }
      );
    };
}
