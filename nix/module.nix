# services.forage: declared templates (written to /etc/forage/templates) and
# declared sandboxes, each one a systemd unit that runs `forage-ctl up` on start and
# `forage-ctl down` (archiving the work, never discarding it) on stop.
#
# The logic that turns options into files and commands lives in ./lib.nix
# (builtins only, tested offline by nix/tests/lib-test.nix); this file declares the
# options and wires the results into NixOS. See docs/nixos.md.
{
  config,
  lib,
  pkgs,
  ...
}:

let
  cfg = config.services.forage;
  forage = import ./lib.nix;
  inherit (forage) defaults;

  inherit (lib)
    literalExpression
    mkEnableOption
    mkIf
    mkOption
    types
    ;

  # A path value (`./docker`) goes into the Nix store; a string is a host path.
  pathOrStr = types.either types.path types.str;

  templateModule = {
    options = {
      description = mkOption {
        type = types.str;
        default = defaults.description;
        description = "One line shown by `forage-ctl templates`.";
      };

      image = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "debian:12";
        description = ''
          An image that must already be in the Docker engine (forage does not pull).
          Set exactly one of `image`, `build` and `hostImage`; with `agent.package`
          and none of them, the template gets an image built offline from the
          host's `sh`, `cat`, `sleep` and `touch`.
        '';
      };

      build = mkOption {
        default = null;
        example = literalExpression ''{ context = "''${./my-agent}"; }'';
        description = "Build the image from a Dockerfile, through the Engine API.";
        type = types.nullOr (
          types.submodule {
            options = {
              context = mkOption {
                type = pathOrStr;
                default = defaults.buildContext;
                description = ''
                  The build context directory. A relative path is relative to
                  /etc/forage/templates; a Nix path (`./my-agent`) is copied into
                  the store and used from there.
                '';
              };
              dockerfile = mkOption {
                type = types.str;
                default = defaults.buildDockerfile;
                description = "The Dockerfile, relative to the context.";
              };
            };
          }
        );
      };

      hostImage = mkOption {
        default = null;
        example = {
          tools = [
            "sh"
            "git"
          ];
          require = [ "sh" ];
        };
        description = ''
          Build the image offline from programs on the host: each name is looked
          up on the PATH of the sandbox's unit (`services.forage.hostTools`) and
          copied into the image with its shared libraries.
        '';
        type = types.nullOr (
          types.submodule {
            options = {
              tools = mkOption {
                type = types.listOf types.str;
                description = "Program names to copy; those not found are skipped.";
              };
              require = mkOption {
                type = types.listOf types.str;
                default = [ ];
                description = "Names from `tools` that must be found, or `up` fails.";
              };
            };
          }
        );
      };

      agent = {
        package = mkOption {
          type = types.nullOr types.package;
          default = null;
          example = literalExpression "pkgs.aider-chat";
          description = ''
            Run this Nix package's main program (`meta.mainProgram`) as the
            agent. The host's /nix/store is mounted read-only at /nix/store, so
            the package and everything it needs are there at the same paths.
            Arguments go in `agent.args`; leave `agent.command` empty.
          '';
        };
        command = mkOption {
          type = types.listOf types.str;
          default = [ ];
          example = [
            "claude"
            "--dangerously-skip-permissions"
          ];
          description = ''
            The agent, the container's main process (not run through a shell).
            Required unless `agent.package` is set.
          '';
        };
        args = mkOption {
          type = types.listOf types.str;
          default = [ ];
          description = "Arguments appended to the agent's command (or to `agent.package`'s program).";
        };
        env = mkOption {
          type = types.attrsOf types.str;
          default = { };
          example = {
            CLAUDE_CONFIG_DIR = "/home/agent/.claude";
          };
          description = ''
            Environment variables for the agent. They are visible in
            `docker inspect` and in the Nix store: never put secrets here.
          '';
        };
        task = mkOption {
          type = types.listOf types.str;
          default = [ ];
          example = [ "{task}" ];
          description = ''
            How the agent takes `up --task`: arguments appended to its command
            when a task is given; `{task}` is the task's text, `{task_file}`
            the file holding it (read inside the container).
          '';
        };
        secrets = mkOption {
          type = types.attrsOf types.str;
          default = { };
          example = {
            ANTHROPIC_API_KEY = "anthropic";
          };
          description = ''
            Environment variable name → secret name. The values come from
            files given to `up` as `--secret NAME=FILE` (a sandbox's
            `extraArgs`), read inside the container; they are never in the Nix
            store or in the container's configuration.
          '';
        };
      };

      workspace.readOnly = mkOption {
        type = types.bool;
        default = defaults.workspaceReadOnly;
        description = "Mount the workspace read-only at /workspace.";
      };

      network = mkOption {
        type = types.enum [
          "full"
          "none"
          "restricted"
        ];
        default = defaults.network;
        description = "`full`: Docker's default bridge network; `none`: loopback only; `restricted`: only the hosts of `networkAllow` (and the user's allow file, and `up --allow`), through forage's egress proxy.";
      };

      networkAllow = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [
          "api.anthropic.com"
          "*.githubusercontent.com"
          "models.internal:11434"
        ];
        description = "With `network = \"restricted\"`: the hosts the sandbox may reach (names, `*.domain` globs, IPv4 addresses; `:PORT` pins a port, else 80 and 443). Written as the template's `network_allow`.";
      };

      resources = {
        memory = mkOption {
          type = types.str;
          default = defaults.memory;
          example = "512m";
          description = "Memory limit: a number with k, m or g (binary units), at least 6m.";
        };
        cpus = mkOption {
          type = types.numbers.positive;
          default = defaults.cpus;
          example = 1.5;
          description = "CPU limit in cores (fractions allowed), capped at the host's count.";
        };
        pids = mkOption {
          type = types.ints.between 16 4194304;
          default = defaults.pids;
          description = "Maximum number of processes in the container.";
        };
      };

      mounts = mkOption {
        default = [ ];
        example = literalExpression ''
          [ { source = "~/.gitconfig"; target = "/home/agent/.gitconfig"; } ]
        '';
        description = ''
          Extra host paths bind-mounted into the container (`~/` is the home of
          the sandbox's user). The sources must exist when the sandbox starts.
        '';
        type = types.listOf (
          types.submodule {
            options = {
              source = mkOption {
                type = pathOrStr;
                description = "The host path; a Nix path is copied into the store first.";
              };
              target = mkOption {
                type = types.str;
                description = "Absolute path in the container, outside /workspace and /run/secrets.";
              };
              readOnly = mkOption {
                type = types.bool;
                default = defaults.mountReadOnly;
                description = "Whether the mount is read-only.";
              };
            };
          }
        );
      };

      init = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [ "npm ci --ignore-scripts" ];
        description = "Shell commands run once in /workspace before the agent starts.";
      };

      stopSignal = mkOption {
        type = types.str;
        default = defaults.stopSignal;
        example = "SIGHUP";
        description = "The signal `stop` and `down` send to the agent (interactive shells need SIGHUP).";
      };

      stopTimeout = mkOption {
        type = types.ints.between 0 100;
        default = defaults.stopTimeout;
        description = "Seconds to wait after the stop signal before SIGKILL.";
      };
    };
  };

  sandboxModule = {
    options = {
      template = mkOption {
        type = types.str;
        default = "shell";
        example = "claude";
        description = ''
          The template: one of `services.forage.templates` or a built-in
          (${lib.concatStringsSep ", " forage.builtinTemplates}).
        '';
      };
      workspace = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/home/alice/scratch";
        description = "Mount this directory as /workspace, as it is. Set exactly one of workspace, gitWorktree and jj.";
      };
      gitWorktree = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/home/alice/repo";
        description = "Give the agent its own worktree of this git repository, on branch forage-<name>.";
      };
      jj = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/home/alice/repo";
        description = "Give the agent its own jj workspace (forage-<name>) of this repository.";
      };
      base = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "origin/main";
        description = "git: the revision the branch starts from (default HEAD); jj: the revset the workspace starts on (default @-).";
      };
      branch = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "git: the branch to create instead of forage-<name>.";
      };
      user = mkOption {
        type = types.str;
        example = "alice";
        description = ''
          The user the sandbox runs as (the container runs with this uid and
          primary gid). It gets the `docker` group for this unit only. Its
          FORAGE_HOME is `''${services.forage.home}/<user>`.
        '';
      };
      autoStart = mkOption {
        type = types.bool;
        default = true;
        description = "Start the sandbox at boot (the unit is wanted by multi-user.target).";
      };
      extraArgs = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [
          "--secret"
          "anthropic=/run/agenix/anthropic"
          "--memory"
          "8g"
        ];
        description = ''
          More arguments for `forage-ctl up` (see `forage-ctl up --help`), e.g.
          `--secret NAME=FILE` with FILE managed outside the Nix store (agenix,
          sops-nix) and readable by `user`.
        '';
      };
      agentArgs = mkOption {
        type = types.listOf types.str;
        default = [ ];
        description = "Arguments appended to the template's agent command (`up … -- ARGS`).";
      };
    };
  };

  # The template as lib.nix takes it: agent.package resolved to its program.
  templateInput =
    t:
    t
    // {
      agent = t.agent // {
        program = if t.agent.package == null then null else lib.getExe t.agent.package;
      };
    };

  forageCtl = "${cfg.package}/bin/forage-ctl";

  unitOf = forage.sandboxUnit {
    inherit forageCtl;
    inherit (cfg) home;
  };

  users = lib.unique (lib.mapAttrsToList (_: s: s.user) cfg.sandboxes);

  groupOf =
    user:
    let
      g = (config.users.users.${user} or { }).group or "";
    in
    if g == "" then "-" else g;

  toAssertions = map (message: {
    assertion = false;
    inherit message;
  });
in
{
  options.services.forage = {
    enable = mkEnableOption "forage, Docker sandboxes for AI coding agents";

    package = mkOption {
      type = types.package;
      default = pkgs.callPackage ./package.nix { };
      defaultText = literalExpression "pkgs.callPackage ./nix/package.nix { }";
      description = "The forage package (forage-ctl).";
    };

    home = mkOption {
      type = types.str;
      default = "/var/lib/forage";
      description = ''
        Where declared sandboxes keep their state: each sandbox user gets
        `<home>/<user>` (mode 0700, owned by the user) as its FORAGE_HOME.
      '';
    };

    hostTools = mkOption {
      type = types.listOf types.package;
      default = with pkgs; [
        bashInteractive
        coreutils
        findutils
        gnugrep
        gnused
        gawk
        gnutar
        gzip
        diffutils
        less
        procps
        git
      ];
      defaultText = literalExpression "with pkgs; [ bashInteractive coreutils findutils gnugrep gnused gawk gnutar gzip diffutils less procps git ]";
      description = ''
        Packages on the PATH of the sandbox units. Templates whose image is built
        from host tools (`hostImage`, the built-in `shell` and `review`, and
        `agent.package` templates without an image) copy their programs from
        here; `sh` is required. jj comes with the package itself.
      '';
    };

    exportHome = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Set FORAGE_HOME to `<home>/$USER` in the login shells of the users who own
        declared sandboxes (unless already set), so that their `forage-ctl list`,
        `attach` and `shell` see those sandboxes.
      '';
    };

    templates = mkOption {
      type = types.attrsOf (types.submodule templateModule);
      default = { };
      description = ''
        Templates written to /etc/forage/templates/<name>.yaml (as JSON, which is
        YAML). The fields are those of docs/templates.md, in camelCase
        (hostImage, workspace.readOnly, mounts.*.readOnly, stopSignal,
        stopTimeout). A template named like a built-in replaces it.
      '';
    };

    sandboxes = mkOption {
      type = types.attrsOf (types.submodule sandboxModule);
      default = { };
      example = literalExpression ''
        {
          agent-a = {
            template = "claude";
            gitWorktree = "/home/alice/repo";
            user = "alice";
            extraArgs = [ "--secret" "anthropic=''${config.age.secrets.anthropic.path}" ];
          };
        }
      '';
      description = ''
        Sandboxes, each a systemd unit `forage-sandbox-<name>` that runs
        `forage-ctl up` when started and `forage-ctl down` when stopped (which
        archives the agent's work; `forage-ctl restore <name>` brings it back).
      '';
    };
  };

  config = mkIf cfg.enable {
    assertions =
      [
        {
          assertion = lib.hasPrefix "/" cfg.home;
          message = "services.forage.home must be an absolute path";
        }
      ]
      ++ lib.concatLists (
        lib.mapAttrsToList (name: t: toAssertions (forage.templateErrors name (templateInput t))) cfg.templates
      )
      ++ lib.concatLists (
        lib.mapAttrsToList (
          name: s: toAssertions (forage.sandboxErrors { templates = lib.attrNames cfg.templates; } name s)
        ) cfg.sandboxes
      );

    virtualisation.docker.enable = true;

    environment.systemPackages = [ cfg.package ];

    environment.etc = lib.mapAttrs' (
      name: t:
      lib.nameValuePair "forage/templates/${name}.yaml" {
        text = forage.templateText (templateInput t);
      }
    ) cfg.templates;

    environment.extraInit = mkIf (cfg.exportHome && users != [ ]) (forage.sessionInit cfg.home users);

    systemd.tmpfiles.settings."10-forage" =
      {
        ${cfg.home}.d = {
          mode = "0755";
          user = "root";
          group = "root";
        };
      }
      // lib.listToAttrs (
        map (
          user:
          lib.nameValuePair "${cfg.home}/${user}" {
            d = {
              mode = "0700";
              inherit user;
              group = groupOf user;
            };
          }
        ) users
      );

    systemd.services = lib.mapAttrs' (
      name: s:
      let
        unit = unitOf name s;
      in
      lib.nameValuePair unit.unitName {
        description = "forage sandbox ${name} (template ${s.template})";
        documentation = [ "man:forage-ctl(1)" ];
        # Wants=, not Requires=: with Requires=, every restart of docker.service (a
        # `nixos-rebuild switch` that updates Docker restarts it) would restart this
        # unit too, i.e. `down` and a fresh `up`. With virtualisation.docker.liveRestore
        # the containers keep running across a daemon restart instead.
        wants = [
          "docker.service"
          "network-online.target"
        ];
        after = [
          "docker.service"
          "network-online.target"
          "systemd-tmpfiles-setup.service"
        ];
        wantedBy = lib.optional s.autoStart "multi-user.target";
        # host_image templates copy their programs from this PATH.
        path = cfg.hostTools;
        environment.FORAGE_HOME = unit.forageHome;
        # Restarting means `down` (the work is archived) and a fresh `up`: never do
        # that behind the user's back on `nixos-rebuild switch`. Changes take effect
        # at the next `systemctl restart forage-sandbox-<name>` or reboot.
        restartIfChanged = false;
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          User = s.user;
          SupplementaryGroups = [ "docker" ];
          ExecStart = pkgs.writeShellScript "${unit.unitName}-up" unit.startScript;
          ExecStop = pkgs.writeShellScript "${unit.unitName}-down" unit.stopScript;
          # Building an agent template's image on first start can take minutes.
          TimeoutStartSec = "30min";
          # `down` waits up to the template's stop_timeout (<= 100 s), then archives.
          TimeoutStopSec = "5min";
        };
      }
    ) cfg.sandboxes;
  };
}
