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
    mkDefault
    mkEnableOption
    mkIf
    mkOption
    types
    ;

  engine = forage.engines.${cfg.engine};
  isPodman = cfg.engine == "podman";

  # The engine's own CLI, used only to load the images Nix builds (forage-ctl
  # itself speaks the Engine API).
  engineCli =
    if isPodman then
      "${config.virtualisation.podman.package}/bin/podman"
    else
      "${config.virtualisation.docker.package}/bin/docker";

  # Templates with `packages`: their images, built by Nix as a script that streams
  # the image's tar archive (nothing big in the store), loaded by forage-image-<name>.
  nixImages = lib.mapAttrs (
    name: t:
    pkgs.dockerTools.streamLayeredImage {
      name = forage.nixImageName name;
      # forage's launcher runs `sh -c` with cat, sleep and touch (secrets, init).
      contents = [
        pkgs.bashInteractive
        pkgs.coreutils
      ]
      ++ t.packages
      ++ lib.optional (t.agent.package != null) t.agent.package;
      extraCommands = "mkdir -m 1777 tmp";
      config.Env = [ "PATH=/bin" ];
    }
  ) (lib.filterAttrs (_: t: t.packages != [ ]) cfg.templates);

  # The reference the template file names: dockerTools' tag follows the contents,
  # so a new package set is a new image, and the old tag is never reused.
  nixImageRef = name: "${nixImages.${name}.imageName}:${nixImages.${name}.imageTag}";
  imageUnit = name: "forage-image-${name}";

  # forage-image-<template>: loads the image into the engine before the sandboxes
  # start (they want and follow it) and at boot.
  imageService = name: image: {
    description = "forage: load the Nix-built image of template ${name} into ${engine.name}";
    wants = [ engine.unit ];
    after = [ engine.unit ];
    # Also for those who run `forage-ctl up --template ${name}` themselves.
    wantedBy = [ "multi-user.target" ];
    serviceConfig = {
      Type = "oneshot";
      RemainAfterExit = true;
      # Only when the engine lacks the tag; the tar archive is streamed, never stored.
      ExecStart = pkgs.writeShellScript "${imageUnit name}-load" ''
        set -euo pipefail
        if ${engineCli} image inspect ${forage.shellQuote (nixImageRef name)} >/dev/null 2>&1; then
          exit 0
        fi
        ${image} | ${engineCli} load
      '';
      TimeoutStartSec = "30min";
    };
  };

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
          An image that must already be in the engine (forage does not pull).
          Set exactly one of `image`, `build`, `hostImage` and `packages`; with
          `agent.package` and none of them, the template gets an image built
          offline from the host's `sh`, `cat`, `sleep` and `touch`.
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
              base = mkOption {
                type = types.nullOr types.str;
                default = null;
                example = "ghcr.io/org/rust-dev:1";
                description = ''
                  An image to layer the template on, passed to the build as the
                  build argument `BASE` (the Dockerfile declares `ARG BASE=<default>`
                  before its first `FROM ''${BASE}`). A project's own toolchain,
                  when it has one, takes its place.
                '';
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

      packages = mkOption {
        type = types.listOf types.package;
        default = [ ];
        example = literalExpression "with pkgs; [ git ripgrep nodejs ]";
        description = ''
          Build the template's image with Nix (`dockerTools.streamLayeredImage`)
          from these packages, `agent.package` when set, and `bashInteractive`
          and `coreutils` (forage's launcher needs `sh`, `cat`, `sleep` and
          `touch`); their programs are on the PATH (`/bin`). The image is named
          `forage-nix/<template>` with the tag Nix derives from its contents, and
          the unit `forage-image-<template>` loads it into the engine before
          the sandboxes start, so the host needs no registry. Not written to the
          template file: the file gets `image:` with that exact tag.
        '';
      };

      agent = {
        package = mkOption {
          type = types.nullOr types.package;
          default = null;
          example = literalExpression "pkgs.aider-chat";
          description = ''
            Run this Nix package's main program (`meta.mainProgram`) as the
            agent. Unless the template has `packages` (whose image holds the
            package), the host's /nix/store is mounted read-only at /nix/store,
            so the package and everything it needs are there at the same paths.
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
          example = [
            "--message-file"
            "{task_file}"
          ];
          description = ''
            How the agent takes `up --task`: arguments appended to its command
            when a task is given; `{task}` is the task's text, `{task_file}`
            the file holding it (read inside the container).
          '';
        };
        state = mkOption {
          type = types.listOf types.str;
          default = [ ];
          example = [
            ".claude/.credentials.json"
            ".config/opencode/"
          ];
          description = ''
            Where the agent keeps its configuration and credentials, relative
            to its home (/home/agent); an entry ending in `/` is a directory.
            forage keeps one copy per template and profile, gives it to each
            sandbox at `up` and takes back what the agent changed at `sync`
            and `down` (newest wins).
          '';
        };
        login = mkOption {
          type = types.listOf types.str;
          default = [ ];
          example = [
            "codex"
            "login"
          ];
          description = "The agent's own login command, which `forage-ctl login TEMPLATE` runs in a throwaway sandbox.";
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

      workspace.cow = mkOption {
        type = types.enum [
          "auto"
          "always"
          "never"
        ];
        default = defaults.workspaceCow;
        description = ''
          A git sandbox's checkout: "always" a copy-on-write overlay on a base
          checkout shared by the sandboxes on the same tree (as `up --cow`),
          "never" (a full checkout of its own, as `up --full-checkout`), or
          "auto": copy-on-write for a tree of 20,000 files or more where the
          overlay can be made. `up --cow` / `--full-checkout` override it.
        '';
      };

      network = mkOption {
        type = types.enum [
          "full"
          "none"
          "restricted"
        ];
        default = defaults.network;
        example = "restricted";
        description = "`full`: the engine's default bridge network; `none`: loopback only; `restricted`: only the hosts of `networkAllow` (and the user's allow file, and `up --allow`), through forage's egress proxy.";
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

      inject = mkOption {
        type = types.attrsOf (
          types.submodule {
            options = {
              header = mkOption {
                type = types.str;
                example = "x-api-key";
                description = "The request header the egress proxy sets.";
              };
              secret = mkOption {
                type = types.str;
                example = "anthropic";
                description = "The secret (a sandbox's `secrets.<name>`, or `up --secret NAME=FILE`) whose value the proxy puts in the header.";
              };
              prefix = mkOption {
                type = types.str;
                default = "";
                example = "Bearer ";
                description = "Text put before the secret's value in the header.";
              };
            };
          }
        );
        default = { };
        example = {
          "api.anthropic.com" = {
            header = "x-api-key";
            secret = "anthropic";
          };
        };
        description = "With `network = \"restricted\"`: keys the egress proxy puts in HTTPS requests to these hosts, so the sandbox holds only a placeholder. Written as the template's `inject`.";
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
          primary gid). It must be declared in `users.users` and be root or a
          member of the engine's group (`docker`, or `podman` with
          `engine = "podman"`, in its `extraGroups`): the unit talks to the
          engine's socket as this user. Its FORAGE_HOME is
          `''${services.forage.home}/<user>`.
        '';
      };
      secrets = mkOption {
        default = { };
        example = literalExpression ''
          { anthropic.file = config.age.secrets.anthropic.path; }
        '';
        description = ''
          Secrets given to `forage-ctl up` as `--secret NAME=FILE`: the
          template's `agent.secrets` maps environment variables to these names.
          Each file must be readable by `user` when the unit starts and must not
          be in the Nix store (every user can read it): use agenix, sops-nix or
          a file you manage. Only the path is in the unit; forage reads the file
          and its content reaches the agent through /run/secrets, never the
          container's configuration.
        '';
        type = types.attrsOf (
          types.submodule {
            options.file = mkOption {
              type = types.str;
              example = "/run/agenix/anthropic";
              description = "Absolute path of the file holding the secret (a string, so that Nix never copies it into the store).";
            };
          }
        );
      };
      restart = mkOption {
        type = types.enum [
          "no"
          "on-failure"
        ];
        default = defaults.restart;
        example = "on-failure";
        description = ''
          The unit's systemd `Restart=`. The unit is a oneshot that runs
          `forage-ctl up` and then stays active, so `on-failure` retries a
          failed `up` (every 30 s, within systemd's start limit), e.g. when the
          engine or a network mount was not ready at boot; an agent that exits
          later does not restart the unit. The default `no` leaves a failed
          `up` for you to read in `journalctl -u forage-sandbox-<name>`.
        '';
      };
      after = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [ "agenix.service" "home-alice-repo.mount" ];
        description = "More units this sandbox's unit starts after (systemd `After=`), added to the engine's.";
      };
      wants = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [ "home-alice-repo.mount" ];
        description = "More units this sandbox's unit pulls in (systemd `Wants=`); list them in `after` too to order them.";
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
          "--memory"
          "8g"
          "--network"
          "none"
        ];
        description = ''
          More arguments for `forage-ctl up` (see `forage-ctl up --help`).
          Secrets go in `secrets` (a `--secret` here works too, and a file in
          the Nix store is refused the same way).
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
    name: t:
    t
    // {
      agent = t.agent // {
        program = if t.agent.package == null then null else lib.getExe t.agent.package;
      };
      nixImage = if nixImages ? ${name} then nixImageRef name else null;
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

    engine = mkOption {
      type = types.enum (lib.attrNames forage.engines);
      default = defaults.engine;
      example = "podman";
      description = ''
        The container engine the sandboxes run on. The module enables it with
        `mkDefault` (your own `virtualisation.docker.enable` or
        `virtualisation.podman.enable` wins): `docker` sets
        `virtualisation.docker.enable`; `podman` sets `virtualisation.podman.enable`
        and `virtualisation.podman.dockerSocket.enable` (/run/docker.sock, so that
        forage-ctl run by hand finds Podman) and gives the units
        `DOCKER_HOST=unix:///run/podman/podman.sock`, rootful Podman's socket.
        Sandbox users must be root or in the engine's group (`docker` or
        `podman`).

        forage-ctl's own support for Podman is still coming (issue 29): until it
        lands, `podman` gives you the units and the engine, but forage-ctl may fail
        where Podman's API differs from Docker's.
      '';
    };

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
        (hostImage, workspace.readOnly, workspace.cow, mounts.*.readOnly, stopSignal,
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
        lib.mapAttrsToList (name: t: toAssertions (forage.templateErrors name (templateInput name t))) cfg.templates
      )
      ++ lib.concatLists (
        lib.mapAttrsToList (
          name: s:
          toAssertions (
            forage.sandboxErrors { templates = lib.attrNames cfg.templates; } name s
            ++ forage.userErrors {
              inherit (cfg) engine;
              inherit (config.users) users;
            } name s
            ++ forage.networkErrors {
              inherit (cfg) engine;
              dockerToo = config.virtualisation.docker.enable;
              templateNetworks = lib.mapAttrs (_: t: t.network) cfg.templates;
            } name s
          )
        ) cfg.sandboxes
      );

    # mkDefault: a host that sets these itself (e.g. Docker off for a Podman host
    # that also has Docker installed) keeps its own choice.
    virtualisation.docker.enable = mkIf (!isPodman) (mkDefault true);
    virtualisation.podman = mkIf isPodman {
      enable = mkDefault true;
      dockerSocket.enable = mkDefault true;
    };

    environment.systemPackages = [ cfg.package ];

    environment.etc = lib.mapAttrs' (
      name: t:
      lib.nameValuePair "forage/templates/${name}.yaml" {
        text = forage.templateText (templateInput name t);
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

    systemd.services =
      lib.mapAttrs' (name: image: lib.nameValuePair (imageUnit name) (imageService name image)) nixImages
      // lib.mapAttrs' (
      name: s:
      let
        unit = unitOf name s;
        # The image unit of its template, when Nix builds that image.
        images = lib.optional (nixImages ? ${s.template}) "${imageUnit s.template}.service";
      in
      lib.nameValuePair unit.unitName {
        description = "forage sandbox ${name} (template ${s.template})";
        documentation = [ "man:forage-ctl(1)" ];
        # Wants=, not Requires=: with Requires=, every restart of the engine's unit
        # (a `nixos-rebuild switch` that updates Docker restarts docker.service)
        # would restart this unit too, i.e. `down` and a fresh `up`. With
        # virtualisation.docker.liveRestore the containers keep running across a
        # daemon restart instead.
        # (Wants= for the image unit too: a restart of it on `nixos-rebuild switch`
        # must not restart the sandbox.)
        wants = [
          engine.unit
          "network-online.target"
        ]
        ++ images
        ++ s.wants;
        after = [
          engine.unit
          "network-online.target"
          "systemd-tmpfiles-setup.service"
        ]
        ++ images
        ++ s.after;
        wantedBy = lib.optional s.autoStart "multi-user.target";
        # host_image templates copy their programs from this PATH.
        path = cfg.hostTools;
        environment = {
          FORAGE_HOME = unit.forageHome;
        }
        // lib.optionalAttrs (engine.dockerHost != null) { DOCKER_HOST = engine.dockerHost; };
        # Restarting means `down` (the work is archived) and a fresh `up`: never do
        # that behind the user's back on `nixos-rebuild switch`. Changes take effect
        # at the next `systemctl restart forage-sandbox-<name>` or reboot.
        restartIfChanged = false;
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          User = s.user;
          Restart = s.restart;
          ExecStart = pkgs.writeShellScript "${unit.unitName}-up" unit.startScript;
          ExecStop = pkgs.writeShellScript "${unit.unitName}-down" unit.stopScript;
          # Building an agent template's image on first start can take minutes.
          TimeoutStartSec = "30min";
          # `down` waits up to the template's stop_timeout (<= 100 s), then archives.
          TimeoutStopSec = "5min";
        }
        // lib.optionalAttrs (s.restart != "no") { RestartSec = "30s"; };
      }
    ) cfg.sandboxes;
  };
}
