# nix/module.nix evaluated offline through the stand-in of ./stub-nixos.nix:
#
#   nix-instantiate --eval --strict --json nix/tests/module-test.nix
#
# nix/tests/run compares the result with nix/tests/module-expected.json and has
# the real forage-ctl read the template files the module writes to /etc.
let
  eval = import ./stub-nixos.nix;

  # What the module generates, without the noise of the option tree.
  summary =
    result:
    let
      c = result.config;
    in
    {
      inherit (result) failedAssertions;
      inherit (c) virtualisation;
      systemPackages = c.environment.systemPackages;
      etc = builtins.mapAttrs (_: f: f.text) c.environment.etc;
      extraInit = c.environment.extraInit;
      tmpfiles = c.systemd.tmpfiles.settings;
      services = c.systemd.services;
    };
in
{
  # The example of docs/nixos.md (forage.nix), word for word in services.forage.
  docsExample = summary (eval {
    users.alice = {
      group = "users";
      extraGroups = [ "docker" ];
    };
    otherConfig.age.secrets.anthropic.path = "/run/agenix/anthropic";
    forageConfig =
      { config, pkgs, ... }:
      {
        services.forage = {
          enable = true; # also enables Docker

          # /etc/forage/templates/aider-nix.yaml
          templates.aider-nix = {
            description = "Aider from nixpkgs, on the host's /nix/store";
            agent = {
              package = pkgs.aider-chat; # runs its main program, `aider`
              args = [
                "--model"
                "sonnet"
              ];
              secrets.ANTHROPIC_API_KEY = "anthropic"; # env var <- secret name
            };
            # Offline image from the host's programs; aider runs `git`.
            hostImage = {
              tools = [
                "sh"
                "cat"
                "sleep"
                "touch"
                "git"
              ];
              require = [
                "sh"
                "git"
              ];
            };
            resources.memory = "8g";
          };

          sandboxes.agent-a = {
            template = "claude"; # built-in
            gitWorktree = "/home/alice/repo";
            user = "alice";
            secrets.anthropic.file = config.age.secrets.anthropic.path;
          };

          sandboxes.aider-1 = {
            template = "aider-nix";
            gitWorktree = "/home/alice/repo";
            user = "alice";
            autoStart = false; # start it with systemctl when wanted
            secrets.anthropic.file = config.age.secrets.anthropic.path;
          };
        };
      };
  });

  # Every template option set, a jj sandbox with base and agent arguments, another
  # home, a user whose group the configuration does not know, no exported home.
  everything = summary (eval {
    users.bob.extraGroups = [ "docker" ];
    forageConfig = {
      services.forage = {
        enable = true;
        home = "/srv/forage";
        exportHome = false;
        templates.full = {
          description = "every field";
          build = {
            context = "/srv/templates/full";
            dockerfile = "Dockerfile.agent";
            base = "ghcr.io/org/rust-dev:1";
          };
          agent = {
            command = [ "my-agent" ];
            args = [ "--yes" ];
            env.LOG = "debug";
            secrets.API_KEY = "api";
            task = [
              "--message-file"
              "{task_file}"
            ];
            state = [
              ".my-agent/auth.json"
              ".config/my-agent/"
            ];
            login = [
              "my-agent"
              "login"
            ];
          };
          workspace.readOnly = true;
          workspace.cow = "always";
          network = "none";
          resources = {
            memory = "512m";
            cpus = 1.5;
            pids = 256;
          };
          mounts = [
            {
              source = "~/.gitconfig";
              target = "/home/agent/.gitconfig";
            }
            {
              source = "/var/cache/agent";
              target = "/cache";
              readOnly = false;
            }
          ];
          init = [ "npm ci" ];
          stopSignal = "SIGHUP";
          stopTimeout = 30;
        };
        templates.tiny = {
          image = "debian:12";
          agent.command = [ "bash" ];
        };
        sandboxes."review.1" = {
          template = "review";
          jj = "/home/bob/repo";
          base = "trunk()";
          user = "bob";
          agentArgs = [
            "-c"
            "echo it's here"
          ];
          secrets = {
            api.file = "/run/secrets/api key";
            "gh.token".file = "/run/agenix/gh";
          };
          extraArgs = [
            "--memory"
            "1g"
          ];
          restart = "on-failure";
          after = [ "home-bob-repo.mount" ];
          wants = [ "home-bob-repo.mount" ];
        };
      };
    };
  });

  # engine = "podman" (the example of docs/nixos.md, "Podman and images from Nix
  # packages"): the engine enabled by default with its Docker-compatible socket,
  # the units after podman.socket with DOCKER_HOST, a template whose image Nix
  # builds from packages, and a sandbox run by root (no group needed).
  podman = summary (eval {
    users.carol = {
      group = "users";
      extraGroups = [ "podman" ];
    };
    otherConfig.sops.secrets.openai.path = "/run/secrets/openai";
    forageConfig =
      { config, pkgs, ... }:
      {
        services.forage = {
          enable = true;
          engine = "podman"; # enables Podman and its Docker-compatible socket

          # Image forage-nix/aider-nix:<tag>, built by Nix and loaded by the unit
          # forage-image-aider-nix before the sandboxes start: no registry needed.
          templates.aider-nix = {
            packages = with pkgs; [
              git
              gnugrep
            ];
            agent = {
              package = pkgs.aider-chat;
              secrets.OPENAI_API_KEY = "openai";
              task = [
                "--message-file"
                "{task_file}"
              ];
            };
          };

          sandboxes.fix-tests = {
            template = "aider-nix";
            gitWorktree = "/home/carol/repo";
            user = "carol";
            secrets.openai.file = config.sops.secrets.openai.path;
            restart = "on-failure"; # retry a failed `up` every 30 s
          };

          sandboxes.scratch = {
            workspace = "/srv/scratch";
            user = "root";
          };
        };
      };
  });

  # The wiring of a `packages` template, checked directly: the template file names
  # exactly the image Nix streams, the load unit streams that image into the
  # engine, and the sandbox of that template wants and follows the load unit.
  packagesWiring =
    let
      withPackages =
        packages:
        eval {
          users.dave.extraGroups = [ "docker" ];
          forageConfig =
            { pkgs, ... }:
            {
              services.forage = {
                enable = true;
                templates."Py_Tools" = {
                  packages = packages pkgs;
                  agent.command = [ "git" ];
                };
                sandboxes.py = {
                  template = "Py_Tools";
                  workspace = "/srv/py";
                  user = "dave";
                };
              };
            };
        };
      r = withPackages (pkgs: [ pkgs.git ]);
      c = r.config;
      refOf = r: (builtins.fromJSON r.config.environment.etc."forage/templates/Py_Tools.yaml".text).image;
      image = builtins.fromJSON c.environment.etc."forage/templates/Py_Tools.yaml".text;
      loader = c.systemd.services.forage-image-Py_Tools;
      sandbox = c.systemd.services.forage-sandbox-py;
      loadScript = loader.serviceConfig.ExecStart.text;
      ref = image.image;
      has = needle: builtins.match ".*${needle}.*" loadScript != null;
      # Each must hold; a false one fails the evaluation (so `run --update` cannot
      # record it as expected).
      mustHold =
        checks:
        let
          failed = builtins.filter (n: !checks.${n}) (builtins.attrNames checks);
        in
        if failed == [ ] then checks else throw "packagesWiring: ${builtins.concatStringsSep ", " failed} failed";
    in
    {
      inherit (r) failedAssertions;
      inherit ref loadScript;
    }
    // mustHold {
      # forage-nix/<template, lowercased, other characters '-'>:<tag from the contents>
      refIsNixImage = builtins.match "forage-nix/py-tools:[0-9a-f]{32}" ref != null;
      loadsThatRef = has "image inspect '${ref}'";
      streamsIntoDocker = has "/nix/store/[0-9a-f]{32}-stream-py-tools [|] /nix/store/00000000000000000000000000000000-docker-27.5.1/bin/docker load";
      # Another package set is another image, under another tag.
      newPackagesNewTag = refOf (withPackages (pkgs: [ pkgs.git pkgs.gnugrep ])) != ref;
      samePackagesSameTag = refOf (withPackages (pkgs: [ pkgs.git ])) == ref;
      sandboxWants = builtins.elem "forage-image-Py_Tools.service" sandbox.wants;
      sandboxAfter = builtins.elem "forage-image-Py_Tools.service" sandbox.after;
      noStoreMount = !(image ? mounts);
    };

  disabled = (eval { forageConfig.services.forage = { }; }).config;

  # Contradictions the module refuses at evaluation time.
  refused =
    (eval {
      users.alice.extraGroups = [ "docker" ];
      forageConfig.services.forage = {
        enable = true;
        home = "var/lib/forage";
        templates.two-sources = {
          image = "debian:12";
          hostImage.tools = [ "sh" ];
          agent.command = [ "sh" ];
        };
        templates.package-and-command = {
          agent.package = {
            type = "derivation";
            outPath = "/nix/store/00000000000000000000000000000000-hello";
            meta.mainProgram = "hello";
          };
          agent.command = [ "hello" ];
        };
        sandboxes.none = {
          template = "shell";
          user = "alice";
        };
        sandboxes.two = {
          workspace = "/srv/a";
          gitWorktree = "/srv/b";
          user = "alice";
        };
        sandboxes.unknown = {
          template = "nope";
          workspace = "/srv/a";
          user = "alice";
        };
        sandboxes.leaky = {
          template = "claude";
          gitWorktree = "/srv/a";
          user = "alice";
          extraArgs = [
            "--secret"
            "anthropic=/nix/store/00000000000000000000000000000000-key"
          ];
        };
      };
    }).failedAssertions;

  # The assertions on users, secrets and packages, each fired alone by one bad
  # value (the rest of its configuration is valid).
  refusedEach =
    let
      only =
        {
          users ? {
            alice.extraGroups = [ "docker" ];
          },
          engine ? "docker",
          sandbox ? { },
          template ? null,
          otherConfig ? { },
        }:
        (eval {
          inherit users otherConfig;
          forageConfig.services.forage = {
            enable = true;
            inherit engine;
            sandboxes.s = {
              workspace = "/srv/a";
              user = "alice";
            }
            // sandbox;
          }
          // (if template == null then { } else { templates.t = template; });
        }).failedAssertions;
    in
    {
      valid = only { };
      undeclaredUser = only { sandbox.user = "mallory"; };
      notInDocker = only { users.alice.extraGroups = [ "wheel" ]; };
      # In the docker group, but the engine is Podman.
      notInPodman = only { engine = "podman"; };
      podmanMember = only {
        engine = "podman";
        users.alice.extraGroups = [ "podman" ];
      };
      # A restricted sandbox on rootful Podman where Docker runs too: from
      # its template, from its extraArgs; the same template on Podman alone
      # and on Docker is valid.
      restrictedTemplateOnPodman = only {
        engine = "podman";
        users.alice.extraGroups = [ "podman" ];
        otherConfig.virtualisation.docker.enable = true;
        sandbox.template = "t";
        template = {
          image = "debian:12";
          agent.command = [ "sh" ];
          network = "restricted";
        };
      };
      restrictedArgsOnPodman = only {
        engine = "podman";
        users.alice.extraGroups = [ "podman" ];
        otherConfig.virtualisation.docker.enable = true;
        sandbox.extraArgs = [
          "--network"
          "restricted"
        ];
      };
      restrictedTemplateOnPodmanAlone = only {
        engine = "podman";
        users.alice.extraGroups = [ "podman" ];
        sandbox.template = "t";
        template = {
          image = "debian:12";
          agent.command = [ "sh" ];
          network = "restricted";
        };
      };
      restrictedTemplateOnDocker = only {
        sandbox.template = "t";
        template = {
          image = "debian:12";
          agent.command = [ "sh" ];
          network = "restricted";
        };
      };
      primaryGroup = only { users.alice.group = "docker"; };
      root = only {
        users = { };
        sandbox.user = "root";
      };
      secretInStore = only { sandbox.secrets.key.file = "/nix/store/00000000000000000000000000000000-key"; };
      secretRelative = only { sandbox.secrets.key.file = "secrets/key"; };
      secretBadName = only { sandbox.secrets.Key.file = "/run/agenix/key"; };
      packagesAndImage = only {
        template = {
          image = "debian:12";
          packages = [
            {
              type = "derivation";
              outPath = "/nix/store/00000000000000000000000000000000-git";
            }
          ];
          agent.command = [ "git" ];
        };
      };
    };
}
