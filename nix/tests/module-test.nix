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
      docker = c.virtualisation.docker.enable;
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
    users.alice.group = "users";
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
            extraArgs = [
              "--secret"
              "anthropic=${config.age.secrets.anthropic.path}"
            ];
          };

          sandboxes.aider-1 = {
            template = "aider-nix";
            gitWorktree = "/home/alice/repo";
            user = "alice";
            autoStart = false; # start it with systemctl when wanted
            extraArgs = [
              "--secret"
              "anthropic=${config.age.secrets.anthropic.path}"
            ];
          };
        };
      };
  });

  # Every template option set, a jj sandbox with base and agent arguments, another
  # home, a user whose group the configuration does not know, no exported home.
  everything = summary (eval {
    users.bob = { };
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
        };
      };
    };
  });

  disabled = (eval { forageConfig.services.forage = { }; }).config;

  # Contradictions the module refuses at evaluation time.
  refused =
    (eval {
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
}
