# Tests of nix/lib.nix, evaluated offline with builtins only:
#
#   nix-instantiate --eval --strict --json nix/tests/lib-test.nix
#
# nix/tests/run compares the result with nix/tests/expected.json, then writes each
# of `templateFiles` to a directory and has the real forage-ctl parse it.
let
  forage = import ../lib.nix;
  inherit (builtins) mapAttrs;

  # Sample templates, shaped like services.forage.templates.<name> (the module
  # passes `agent.program`, the main program of `agent.package`).
  templates = {
    # The smallest valid template: everything else takes forage's defaults.
    minimal = {
      image = "debian:12";
      agent.command = [ "bash" ];
    };

    # Every field, with values that need quoting in YAML.
    full = {
      description = "Reviewer: \"quoted\", #not-a-comment, 'single', ünïcode, a: colon";
      build = {
        context = "/srv/forage/myagent";
        dockerfile = "Dockerfile.agent";
        base = "ghcr.io/org/rust-dev:1";
      };
      agent = {
        command = [
          "my-agent"
          "--yes"
        ];
        args = [ "--model=large" ];
        env = {
          MY_AGENT_LOG = "info";
          DEBUG = "1";
          EMPTY = "";
        };
        secrets.MY_AGENT_API_KEY = "myagent";
      };
      workspace.readOnly = true;
      workspace.cow = "never";
      network = "none";
      resources = {
        memory = "512m";
        cpus = 1.5;
        pids = 256;
      };
      mounts = [
        {
          source = "~/.config/my-agent";
          target = "/etc/my-agent";
        }
        {
          source = "/var/cache/my-agent";
          target = "/cache";
          readOnly = false;
        }
      ];
      init = [
        "npm ci --ignore-scripts"
        "printf '%s\\n' \"$HOME\" > /tmp/home; echo 'it''s done'"
      ];
      stopSignal = "SIGHUP";
      stopTimeout = 30;
    };

    # A Nix package as the agent, with no image source: the offline host image,
    # and /nix/store mounted read-only before the template's own mounts.
    package = {
      description = "hello from Nix";
      agent = {
        program = "/nix/store/00000000000000000000000000000000-hello-2.12.1/bin/hello";
        args = [
          "--greeting"
          "hi there"
        ];
        secrets.API_KEY = "api";
      };
      mounts = [
        {
          source = "/srv/data";
          target = "/data";
        }
      ];
      init = [ "true" ];
    };

    # `packages`: the image Nix builds (the module passes its reference as
    # nixImage); the agent package is in it, so no /nix/store mount.
    nixPackages = {
      packages = [ "git" ];
      nixImage = "forage-nix/nixpackages:0123456789abcdef0123456789abcdef";
      agent.program = "/nix/store/00000000000000000000000000000000-hello-2.12.1/bin/hello";
    };
    # `network = "restricted"` with its allowlist, as `network_allow`.
    restricted = {
      image = "debian:12";
      agent.command = [ "sh" ];
      network = "restricted";
      networkAllow = [
        "api.anthropic.com"
        "*.githubusercontent.com"
        "models.internal:11434"
      ];
      inject."api.openai.com" = {
        header = "authorization";
        secret = "openai";
        prefix = "Bearer ";
      };
    };

    # A Nix package in an image of the template's choosing.
    packageInImage = {
      image = "debian:12";
      agent.program = "/nix/store/00000000000000000000000000000000-hello-2.12.1/bin/hello";
    };

    hostImage = {
      hostImage = {
        tools = [
          "sh"
          "git"
        ];
        require = [ "sh" ];
      };
      agent.command = [
        "sh"
        "-c"
        "exec sleep infinity"
      ];
      stopSignal = "SIGKILL";
    };
  };

  # Templates that must be refused, with what is wrong.
  badTemplates = {
    twoSources = {
      image = "debian:12";
      hostImage.tools = [ "sh" ];
      agent.command = [ "sh" ];
    };
    noSource.agent.command = [ "sh" ];
    packageAndCommand = {
      agent = {
        program = "/nix/store/00000000000000000000000000000000-hello/bin/hello";
        command = [ "hello" ];
      };
    };
    noCommand.image = "debian:12";
    badNetwork = {
      image = "debian:12";
      agent.command = [ "sh" ];
      network = "host";
    };
    badSecrets = {
      image = "debian:12";
      agent = {
        command = [ "sh" ];
        secrets = {
          "1KEY" = "ok";
          API = "Bad";
          GOOD = "fine.name-1";
        };
      };
    };
    badMounts = {
      image = "debian:12";
      agent.command = [ "sh" ];
      mounts = map (target: {
        source = "/srv";
        inherit target;
      }) [
        "relative/path"
        "/"
        "//"
        "/workspace"
        "/workspace/x"
        "/./workspace"
        "/run/secrets"
        "/run/secrets/k"
        "/run/forage/task.md"
        "/a/../b"
        # these are fine
        "/workspace2"
        "/run/secretsx"
        "/run"
        "/home/agent/.gitconfig"
      ];
    };
    badLimits = {
      image = "debian:12";
      agent.command = [ "sh" ];
      resources = {
        memory = "lots";
        cpus = 0;
        pids = 8;
      };
      stopTimeout = 300;
      stopSignal = "TERM";
    };
    tooLittleMemory = {
      image = "debian:12";
      agent.command = [ "sh" ];
      resources.memory = "5m";
    };
  };

  memorySizes = [
    "4g"
    "512m"
    "512MB"
    " 6m "
    "6291456"
    "1024b"
    "6291456b"
    "007g"
    "1k"
    "5m"
    "lots"
    "4 g"
    "b"
    ""
  ];

  unit = forage.sandboxUnit {
    forageCtl = "/nix/store/00000000000000000000000000000000-forage-0.1.0/bin/forage-ctl";
    home = "/var/lib/forage";
  };

  # Sample sandboxes, shaped like services.forage.sandboxes.<name>.
  sandboxes = {
    # The example of docs/nixos.md.
    agent-a = {
      template = "claude";
      gitWorktree = "/home/alice/repo";
      user = "alice";
      extraArgs = [
        "--secret"
        "anthropic=/run/agenix/anthropic"
      ];
    };
    scratch = {
      template = "package";
      workspace = "/srv/scratch dir";
      user = "bob";
    };
    fix-1 = {
      template = "shell";
      gitWorktree = "/home/alice/repo";
      base = "origin/main";
      branch = "fix/issue-1";
      user = "alice";
      extraArgs = [
        "--memory"
        "2g"
      ];
      agentArgs = [
        "-c"
        "echo it's $HOME"
      ];
    };
    "review.1" = {
      template = "review";
      jj = "/home/alice/jjrepo";
      base = "trunk()";
      user = "alice";
    };
    # Typed secrets: `--secret NAME=FILE` each, by name, before extraArgs.
    with-secrets = {
      template = "claude";
      gitWorktree = "/home/alice/repo";
      user = "alice";
      secrets = {
        openai.file = "/run/secrets/openai";
        anthropic.file = "/run/agenix/anthropic";
      };
      extraArgs = [ "--read-only" ];
    };
  };

  badSandboxes = {
    no-workspace = {
      template = "shell";
      user = "alice";
    };
    two-workspaces = {
      template = "shell";
      workspace = "/srv/a";
      jj = "/srv/b";
      user = "alice";
    };
    relative = {
      template = "shell";
      gitWorktree = "repo";
      user = "alice";
    };
    unknown-template = {
      template = "nope";
      workspace = "/srv/a";
      user = "alice";
    };
    "Bad_Name" = {
      template = "shell";
      workspace = "/srv/a";
      user = "alice";
    };
    no-user = {
      template = "shell";
      workspace = "/srv/a";
      user = "";
    };
    workspace-with-branch = {
      template = "shell";
      workspace = "/srv/a";
      base = "main";
      branch = "x";
      user = "alice";
    };
    jj-with-branch = {
      template = "shell";
      jj = "/srv/a";
      branch = "x";
      user = "alice";
    };
    typed-secrets = {
      template = "claude";
      gitWorktree = "/srv/a";
      user = "alice";
      secrets = {
        in-store.file = "/nix/store/00000000000000000000000000000000-key";
        relative.file = "keys/anthropic";
        Upper.file = "/run/agenix/upper";
        fine.file = "/run/agenix/fine";
      };
    };
    secret-in-store = {
      template = "claude";
      gitWorktree = "/srv/a";
      user = "alice";
      extraArgs = [
        "--secret"
        "anthropic=/nix/store/00000000000000000000000000000000-key"
        "--secret=openai=/nix/store/00000000000000000000000000000000-key2"
        "--secret"
        "fine=/run/secrets/fine"
      ];
    };
  };

  declared = builtins.attrNames templates;
in
{
  templates = mapAttrs (_: forage.templateData) templates;
  # The text nix/module.nix writes to /etc/forage/templates/<name>.yaml.
  templateFiles = mapAttrs (_: forage.templateText) templates;
  templateErrors = mapAttrs forage.templateErrors templates;
  badTemplateErrors = mapAttrs forage.templateErrors badTemplates;
  badTemplateName = forage.templateErrors "x/y" templates.minimal;

  memoryBytes = map (m: {
    size = m;
    bytes = forage.memoryBytes m;
  }) memorySizes;

  sandboxes = mapAttrs unit sandboxes;
  sandboxErrors = mapAttrs (forage.sandboxErrors { templates = declared; }) sandboxes;
  badSandboxErrors = mapAttrs (forage.sandboxErrors { templates = declared; }) badSandboxes;

  # Who may run a sandbox: declared users in the engine's group, or root.
  userErrors =
    let
      users = {
        alice.extraGroups = [ "docker" ];
        bob.extraGroups = [ "podman" ];
        carol.group = "docker";
        dave = { };
      };
      check =
        engine: user:
        forage.userErrors { inherit users engine; } "s" {
          inherit user;
          template = "shell";
          workspace = "/srv/a";
        };
      # mallory is not declared.
      names = builtins.attrNames users ++ [
        "root"
        "mallory"
      ];
      each =
        engine:
        builtins.listToAttrs (
          map (user: {
            name = user;
            value = check engine user;
          }) names
        );
    in
    {
      docker = each "docker";
      podman = each "podman";
    };
  # Restricted sandboxes on rootful Podman where Docker runs too: from the
  # template or extraArgs.
  networkErrors =
    let
      templateNetworks = {
        open = "full";
        tight = "restricted";
      };
      check =
        engine: template: extraArgs:
        forage.networkErrors { inherit templateNetworks engine dockerToo; } "s" {
          inherit template extraArgs;
          workspace = "/srv/a";
        };
      each = engine: {
        fullTemplate = check engine "open" [ ];
        restrictedTemplate = check engine "tight" [ ];
        restrictedArg = check engine "open" [
          "--memory"
          "8g"
          "--network"
          "restricted"
        ];
        restrictedArgEquals = check engine "shell" [ "--network=restricted" ];
        noneArg = check engine "tight" [
          "--network"
          "none"
        ];
        lastArgIsNetwork = check engine "open" [ "--network" ];
      };
      dockerToo = true;
      podmanAlone = forage.networkErrors {
        inherit templateNetworks;
        engine = "podman";
      } "s" { template = "tight"; workspace = "/srv/a"; };
    in
    {
      docker = each "docker";
      podman = each "podman";
      inherit podmanAlone;
    };
  nixImageNames = map forage.nixImageName [
    "aider-nix"
    "Py_Tools.2"
  ];

  sessionInit = forage.sessionInit "/var/lib/forage" [
    "alice"
    "bob"
  ];
  noSessionInit = forage.sessionInit "/var/lib/forage" [ ];
  shellQuote = map forage.shellQuote [
    "plain"
    "it's"
    ""
    "$HOME `x` \"y\""
  ];
}
