# The pure logic of the forage NixOS module (nix/module.nix): template options to
# the data of a template file, sandbox options to the commands of its systemd unit,
# and the checks behind the module's assertions.
#
# It uses nothing but `builtins` (no nixpkgs, no lib), so `nix-instantiate --eval`
# can test it offline: see nix/tests/lib-test.nix and nix/tests/run.
#
# Inputs are plain attribute sets shaped like the module's options (camelCase
# names: hostImage, readOnly, stopSignal, …); attributes left out take forage's
# defaults, the same ones the module's options default to (`defaults` below).
let
  inherit (builtins)
    attrNames
    concatLists
    concatMap
    concatStringsSep
    elem
    elemAt
    filter
    genList
    isPath
    isString
    length
    map
    match
    replaceStrings
    split
    substring
    ;

  optional = cond: x: if cond then [ x ] else [ ];
  optionals = cond: xs: if cond then xs else [ ];
  optionalAttrs = cond: as: if cond then as else { };
  hasPrefix = prefix: s: substring 0 (builtins.stringLength prefix) s == prefix;
  isNull = x: x == null;
  nonNull = x: x != null;

  # A path value (`./docker`) is copied into the store; a string is used as it is.
  pathString = v: if isPath v then "${v}" else v;

  # Image repository names are lowercase letters, digits and separators: the
  # template name lowercased, anything else turned into '-' (as forage names its
  # forage-host/ and forage-build/ images).
  chars = s: genList (i: substring i 1 s) (builtins.stringLength s);
  toLower = replaceStrings (chars "ABCDEFGHIJKLMNOPQRSTUVWXYZ") (chars "abcdefghijklmnopqrstuvwxyz");
  imageRepoPart = name: concatStringsSep "" (map (c: if match "[a-z0-9]" c != null then c else "-") (chars (toLower name)));

  # The image the module builds with dockerTools for template `name` when it
  # declares `packages` (its tag is the one dockerTools derives from the contents).
  nixImageName = name: "forage-nix/${imageRepoPart name}";

  # forage's defaults (src/template.rs), which the module's options default to.
  defaults = {
    description = "";
    network = "full";
    memory = "4g";
    cpus = 2;
    pids = 1024;
    stopSignal = "SIGTERM";
    stopTimeout = 10;
    workspaceReadOnly = false;
    # auto: copy-on-write for a large tree (written only when not auto, as forage writes it).
    workspaceCow = "auto";
    mountReadOnly = true;
    buildContext = ".";
    buildDockerfile = "Dockerfile";
    # The sandbox units' systemd Restart=: a oneshot unit takes "no" or "on-failure".
    restart = "no";
    engine = "docker";
  };

  # What the module needs to know of each engine it can enable: the systemd unit the
  # sandbox units start after, the group whose members may use its socket, and the
  # DOCKER_HOST forage-ctl is given (null: Docker's own default socket).
  engines = {
    docker = {
      name = "Docker";
      unit = "docker.service";
      group = "docker";
      dockerHost = null;
    };
    # Rootful Podman's Docker-compatible API socket, which NixOS serves to the podman
    # group (the module also enables dockerSocket: /run/docker.sock points at it).
    podman = {
      name = "Podman";
      unit = "podman.socket";
      group = "podman";
      dockerHost = "unix:///run/podman/podman.sock";
    };
  };

  # The templates embedded in forage-ctl (templates/ in the source tree).
  builtinTemplates = [
    "shell"
    "review"
    "claude"
    "codex"
    "aider"
    "opencode"
  ];

  # What a template with `agent.package` gets: the host's /nix/store, read-only, so
  # the package's closure is there inside the container at the same paths.
  nixStoreMount = {
    source = "/nix/store";
    target = "/nix/store";
    read_only = true;
  };

  # The image of a template with `agent.package` and no image source of its own:
  # built offline from the host's programs. Only `sh` is required; `cat` (secrets),
  # `sleep` and `touch` (init) are what forage's launcher uses, copied when found.
  packageHostImage = {
    tools = [
      "sh"
      "cat"
      "sleep"
      "touch"
    ];
    require = [ "sh" ];
  };

  # Quotes a string for POSIX sh: 'it'\''s'.
  shellQuote = s: "'" + replaceStrings [ "'" ] [ "'\\''" ] s + "'";
  shellCommand = argv: concatStringsSep " " (map shellQuote argv);

  # Name rules, as forage-ctl checks them (src/names.rs, src/template.rs).
  matches = re: s: isString s && match re s != null;
  isSandboxName = matches "[a-z0-9][a-z0-9_.-]{0,62}";
  isSecretName = isSandboxName;
  isTemplateName = matches "[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}";
  isEnvName = matches "[A-Za-z_][A-Za-z0-9_]*";
  secretNameRule = "1-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter or digit";

  # `resources.memory`: a number with an optional k, m or g (binary units, any
  # case) and an optional trailing b; at least 6m. Returns the bytes, or null.
  memoryBytes =
    raw:
    let
      m = if isString raw then match "[[:space:]]*([0-9]{1,15})([kKmMgG]?)[bB]?[[:space:]]*" raw else null;
      unit = elemAt m 1;
      mult =
        if unit == "" then
          1
        else if elem unit [ "k" "K" ] then
          1024
        else if elem unit [ "m" "M" ] then
          1024 * 1024
        else
          1024 * 1024 * 1024;
      # fromJSON reads "007" as an error; strip leading zeros first.
      digits =
        let
          d = match "0*([0-9]+)" (elemAt m 0);
        in
        elemAt d 0;
      bytes = builtins.fromJSON digits * mult;
    in
    if isNull m then null else if bytes >= 6 * 1024 * 1024 then bytes else null;

  # The components of a path as Rust's Path::components sees them ("." and empty
  # ones dropped).
  pathComponents = p: filter (c: isString c && c != "" && c != ".") (split "/" p);

  isAbsolute = p: isString p && hasPrefix "/" p;

  # mounts[].target: absolute, not "/", no "..", outside /workspace, /run/secrets and /run/forage.
  isMountTarget =
    target:
    let
      cs = pathComponents target;
      under = prefix: length cs >= length prefix && genList (i: elemAt cs i) (length prefix) == prefix;
    in
    isAbsolute target
    && cs != [ ]
    && !(elem ".." cs)
    && !(under [ "workspace" ])
    && !(under [
      "run"
      "secrets"
    ])
    && !(under [
      "run"
      "forage"
    ]);

  # ---------------------------------------------------------------- templates

  # The agent's program when the template runs a Nix package: the module passes
  # `agent.program` (lib.getExe of `agent.package`); tests pass a string.
  agentProgram = t: (t.agent or { }).program or null;

  # `packages` (module only): the image is built by Nix's dockerTools from these
  # packages; the module passes its reference as `nixImage`.
  hasPackages = t: (t.packages or [ ]) != [ ];

  imageSources =
    t:
    filter nonNull [
      (t.image or null)
      (t.build or null)
      (t.hostImage or null)
      (if hasPackages t then t.packages else null)
    ];

  # The template's `image:`: its own, or the one Nix builds from `packages`.
  imageRef = t: if hasPackages t then t.nixImage or null else t.image or null;

  # The template's data, exactly what forage-ctl reads from
  # /etc/forage/templates/<name>.yaml (field names as in docs/templates.md).
  # Optional fields that are unset or empty are left out, as forage itself does
  # when it prints a template (`forage-ctl templates show --json NAME`).
  templateData =
    t:
    let
      agent = t.agent or { };
      program = agentProgram t;
      command = (if nonNull program then [ program ] else agent.command or [ ]) ++ (agent.args or [ ]);
      secrets = agent.secrets or { };
      task = agent.task or [ ];
      state = agent.state or [ ];
      login = agent.login or [ ];
      build = t.build or null;
      hostImage =
        if nonNull (t.hostImage or null) then
          t.hostImage
        else if nonNull program && imageSources t == [ ] then
          packageHostImage
        else
          null;
      resources = t.resources or { };
      # An image built from `packages` holds the agent package's closure itself;
      # otherwise the agent needs the host's store.
      mounts =
        optional (nonNull program && !hasPackages t) nixStoreMount
        ++ map (m: {
          source = pathString m.source;
          inherit (m) target;
          read_only = m.readOnly or defaults.mountReadOnly;
        }) (t.mounts or [ ]);
      init = t.init or [ ];
    in
    {
      description = t.description or defaults.description;
      agent = {
        inherit command;
        env = agent.env or { };
      }
      // optionalAttrs (secrets != { }) { inherit secrets; }
      // optionalAttrs (task != [ ]) { inherit task; }
      // optionalAttrs (state != [ ]) { inherit state; }
      // optionalAttrs (login != [ ]) { inherit login; };
      workspace = {
        read_only = (t.workspace or { }).readOnly or defaults.workspaceReadOnly;
      }
      // optionalAttrs (((t.workspace or { }).cow or defaults.workspaceCow) != defaults.workspaceCow) {
        inherit (t.workspace) cow;
      };
      network = t.network or defaults.network;
      resources = {
        memory = resources.memory or defaults.memory;
        cpus = resources.cpus or defaults.cpus;
        pids = resources.pids or defaults.pids;
      };
      stop_signal = t.stopSignal or defaults.stopSignal;
      stop_timeout = t.stopTimeout or defaults.stopTimeout;
    }
    // optionalAttrs ((t.networkAllow or [ ]) != [ ]) { network_allow = t.networkAllow; }
    // optionalAttrs ((t.inject or { }) != { }) {
      inject = builtins.mapAttrs (
        _: i: { inherit (i) header secret; } // optionalAttrs ((i.prefix or "") != "") { inherit (i) prefix; }
      ) t.inject;
    }
    // optionalAttrs (nonNull (imageRef t)) { image = imageRef t; }
    // optionalAttrs (nonNull build) {
      build = {
        context = pathString (build.context or defaults.buildContext);
        dockerfile = build.dockerfile or defaults.buildDockerfile;
      }
      // optionalAttrs (nonNull (build.base or null)) { inherit (build) base; };
    }
    // optionalAttrs (nonNull hostImage) {
      host_image = {
        inherit (hostImage) tools;
        require = hostImage.require or [ ];
      };
    }
    // optionalAttrs (mounts != [ ]) { inherit mounts; }
    // optionalAttrs (init != [ ]) { inherit init; };

  # The file's text. JSON is YAML 1.2, and forage's parser (serde_yaml_ng) reads it;
  # .ci/run checks that with the real forage-ctl (nix/tests/run).
  templateText = t: builtins.toJSON (templateData t) + "\n";

  # What is wrong with template `name`, as assertion messages ([] when nothing).
  templateErrors =
    name: t:
    let
      at = "services.forage.templates.${name}";
      agent = t.agent or { };
      program = agentProgram t;
      command = agent.command or [ ];
      data = templateData t;
      r = data.resources;
      sources = length (imageSources t);
    in
    optional (!isTemplateName name) "${at}: invalid template name; use 1-64 letters, digits, '-', '_' or '.', not starting with '.'"
    ++ optional (sources > 1) "${at}: set only one of image, build, hostImage and packages"
    ++ optional (
      sources == 0 && isNull program
    ) "${at}: set one of image, build, hostImage or packages (or agent.package, which defaults to an offline image)"
    ++ optional (
      nonNull program && command != [ ]
    ) "${at}: set agent.package or agent.command, not both (agent.args gives the package's program its arguments)"
    ++ optional (
      isNull program && command == [ ]
    ) "${at}: agent.command is empty: name the program the sandbox runs (or set agent.package)"
    ++ optional (!elem data.network [
      "full"
      "none"
      "restricted"
    ]) "${at}: network must be \"full\", \"none\" or \"restricted\""
    ++ concatMap (
      var:
      optional (!isEnvName var) "${at}: agent.secrets: \"${var}\" is not an environment variable name"
      ++ optional (!isSecretName agent.secrets.${var}) "${at}: agent.secrets.${var}: \"${agent.secrets.${var}}\" is not a secret name (1-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter or digit)"
    ) (attrNames (agent.secrets or { }))
    ++ concatMap (
      m:
      optional (!isMountTarget m.target) "${at}: mounts: target \"${m.target}\" must be an absolute path without '..', outside /workspace, /run/secrets and /run/forage"
    ) (t.mounts or [ ])
    ++ optional (isNull (memoryBytes r.memory)) "${at}: resources.memory \"${toString r.memory}\": use a number with k, m or g, at least 6m (e.g. 4g)"
    ++ optional (!(r.cpus > 0)) "${at}: resources.cpus must be above 0"
    ++ optional (r.pids < 16) "${at}: resources.pids must be at least 16"
    ++ optional (
      data.stop_timeout < 0 || data.stop_timeout > 100
    ) "${at}: stopTimeout must be between 0 and 100 seconds"
    ++ optional (!hasPrefix "SIG" data.stop_signal) "${at}: stopSignal \"${data.stop_signal}\" must be a signal name such as SIGTERM";

  # ---------------------------------------------------------------- sandboxes

  workspaceFlags = {
    workspace = "--workspace";
    gitWorktree = "--git-worktree";
    jj = "--jj";
  };

  # The workspace options that are set, e.g. [ "gitWorktree" ].
  workspaceKinds = s: filter (k: (s.${k} or null) != null) (attrNames workspaceFlags);

  # `--secret NAME=FILE` values in extraArgs (both `--secret X` and `--secret=X`).
  secretArgs =
    args:
    let
      n = length args;
      at = i: elemAt args i;
    in
    concatLists (
      genList (
        i:
        let
          a = at i;
          eq = match "--secret=(.*)" a;
        in
        if a == "--secret" && i + 1 < n then
          [ (at (i + 1)) ]
        else if eq != null then
          eq
        else
          [ ]
      ) n
    );

  # What is wrong with sandbox `name`; `templates` are the declared template names.
  sandboxErrors =
    {
      templates ? [ ],
    }:
    name: s:
    let
      at = "services.forage.sandboxes.${name}";
      kinds = workspaceKinds s;
      kind = if length kinds == 1 then elemAt kinds 0 else null;
      template = s.template or null;
      inStore = filter (v: match "[^=]*=/nix/store/.*" v != null) (secretArgs (s.extraArgs or [ ]));
    in
    optional (!isSandboxName name) "${at}: invalid sandbox name; use 1-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter or digit"
    ++ optional (kinds == [ ]) "${at}: set one of workspace, gitWorktree or jj"
    ++ optional (length kinds > 1) "${at}: set only one of workspace, gitWorktree and jj (set: ${concatStringsSep ", " kinds})"
    ++ optional (nonNull kind && !isAbsolute s.${kind}) "${at}: ${kind} must be an absolute path"
    ++ optional (
      !(elem template templates || elem template builtinTemplates)
    ) "${at}: template \"${toString template}\" is neither declared in services.forage.templates nor a built-in (${concatStringsSep ", " builtinTemplates})"
    ++ optional (!isString (s.user or null) || s.user == "") "${at}: user must name the user the sandbox runs as"
    ++ optional (
      kind == "workspace" && (nonNull (s.base or null) || nonNull (s.branch or null))
    ) "${at}: base and branch need a repository (gitWorktree or jj), not workspace"
    ++ optional (kind == "jj" && nonNull (s.branch or null)) "${at}: branch is for gitWorktree; a jj sandbox's workspace is always named forage-${name}"
    ++ map (
      v: "${at}: extraArgs passes --secret ${v}: that file is in the Nix store, which every user can read; keep secrets outside it (agenix, sops-nix, …) and point --secret there"
    ) inStore
    ++ concatMap (secret: secretErrors "${at}.secrets.${secret}" secret s.secrets.${secret}.file) (
      attrNames (s.secrets or { })
    );

  # sandboxes.<name>.secrets.<secret>.file: a host path outside the Nix store (a
  # store path is readable by every user of the host, and by every build).
  secretErrors =
    at: secret: file:
    optional (!isSecretName secret) "${at}: \"${secret}\" is not a secret name (${secretNameRule})"
    ++ optional (!isAbsolute file) "${at}.file \"${toString file}\" must be an absolute path, e.g. /run/agenix/${secret}"
    ++ optional (
      isAbsolute file && hasPrefix "${builtins.storeDir}/" file
    ) "${at}.file \"${file}\" is in the Nix store, which every user can read; keep the secret outside it (agenix: config.age.secrets.<name>.path; sops-nix: config.sops.secrets.<name>.path)";

  # May sandbox `name`'s user run it? `users` is config.users.users, `engine` the
  # module's engine. The user must be declared (forage runs as that uid) and be
  # root or a member of the engine's group, since the unit talks to the engine
  # socket as that user (membership of that group is as good as root on the host).
  userErrors =
    {
      users,
      engine ? defaults.engine,
    }:
    name: s:
    let
      at = "services.forage.sandboxes.${name}";
      user = s.user or "";
      e = engines.${engine};
      u = users.${user};
      groups = (u.extraGroups or [ ]) ++ optional ((u.group or "") != "") u.group;
    in
    if !isString user || user == "" || user == "root" then
      [ ]
    else if !(users ? ${user}) then
      [
        "${at}: user \"${user}\" is not declared in users.users; declare it (users.users.${user} = { isNormalUser = true; extraGroups = [ \"${e.group}\" ]; }) or run the sandbox as a declared user"
      ]
    else
      optional (!(elem e.group groups))
        "${at}: user \"${user}\" may not use ${e.name} (engine = \"${engine}\"): add \"${e.group}\" to users.users.${user}.extraGroups (its members can use the engine's socket, which is as good as root on this host), or run the sandbox as root";

  # Rootful Podman (the module's `engine = "podman"`) cannot run a restricted
  # sandbox on a host that also runs Docker: Docker has the host pass bridged
  # traffic through iptables, where netavark lets nothing through an internal
  # network, so the sandbox could not even reach its egress proxy (forage-ctl
  # refuses such an `up`, exit 4). Refused at evaluation instead, whether the
  # network comes from the sandbox's declared template or from its extraArgs.
  # `templateNetworks`: declared template name to its `network`; `dockerToo`:
  # virtualisation.docker.enable.
  networkErrors =
    {
      templateNetworks,
      engine ? defaults.engine,
      dockerToo ? false,
    }:
    name: s:
    let
      at = "services.forage.sandboxes.${name}";
      args = s.extraArgs or [ ];
      # The value of each `--network X` / `--network=X` in extraArgs; the
      # last one is what `up` takes, over the template's.
      argAt =
        i:
        let
          arg = elemAt args i;
        in
        if arg == "--network" && i + 1 < length args then
          [ (elemAt args (i + 1)) ]
        else if hasPrefix "--network=" arg then
          [ (substring 10 (builtins.stringLength arg) arg) ]
        else
          [ ];
      asked = concatMap argAt (genList (i: i) (length args));
      network =
        if asked != [ ] then elemAt asked (length asked - 1) else templateNetworks.${s.template or ""} or null;
    in
    optional (engine == "podman" && dockerToo && network == "restricted")
      "${at}: network \"restricted\" cannot work on rootful Podman (engine = \"podman\") on a host that also runs Docker (virtualisation.docker.enable): Docker has the host pass bridged traffic through iptables, where netavark lets nothing through the sandbox's internal network, so it could not even reach its egress proxy; use engine = \"docker\" for restricted sandboxes, turn Docker off, or use network \"full\" or \"none\"";

  # The argv of `forage-ctl up` for sandbox `name` (without the program itself).
  upArgs =
    name: s:
    let
      kind = elemAt (workspaceKinds s) 0;
      agentArgs = s.agentArgs or [ ];
    in
    [
      "up"
      name
      "--template"
      s.template
      workspaceFlags.${kind}
      s.${kind}
    ]
    ++ optionals (nonNull (s.base or null)) [
      "--base"
      s.base
    ]
    ++ optionals (nonNull (s.branch or null)) [
      "--branch"
      s.branch
    ]
    # The secret's path only: forage reads the file; its content is never in argv.
    ++ concatMap (secret: [
      "--secret"
      "${secret}=${s.secrets.${secret}.file}"
    ]) (attrNames (s.secrets or { }))
    ++ (s.extraArgs or [ ])
    ++ optionals (agentArgs != [ ]) ([ "--" ] ++ agentArgs);

  # Everything the systemd unit of sandbox `name` needs. `forageCtl` is the path of
  # the forage-ctl program, `home` the module's `home` (each user gets a
  # subdirectory of it as FORAGE_HOME).
  sandboxUnit =
    {
      forageCtl,
      home,
    }:
    name: s:
    let
      forageHome = "${home}/${s.user}";
      record = "${forageHome}/sandboxes/${name}.json";
      up = [ forageCtl ] ++ upArgs name s;
      start = [
        forageCtl
        "start"
        name
      ];
      down = [
        forageCtl
        "down"
        name
      ];
    in
    {
      unitName = "forage-sandbox-${name}";
      inherit
        forageHome
        record
        up
        start
        down
        ;
      # ExecStart. A record left by an unclean shutdown (power loss: ExecStop never
      # ran `down`) would make `up` fail with "already exists"; start that sandbox
      # again instead.
      startScript = ''
        if [ -e ${shellQuote record} ]; then
          echo "sandbox ${name} exists (left by an unclean shutdown?): starting it again" >&2
          exec ${shellCommand start}
        fi
        exec ${shellCommand up}
      '';
      # ExecStop: `down` archives the work (never --discard). A sandbox removed by
      # hand (`forage-ctl down ${name}`) has nothing left to tear down.
      stopScript = ''
        if [ ! -e ${shellQuote record} ]; then
          echo "sandbox ${name} is already gone" >&2
          exit 0
        fi
        exec ${shellCommand down}
      '';
    };

  # Login-shell code that points FORAGE_HOME at <home>/<user> for the users who own
  # declared sandboxes, so their `forage-ctl list`, `attach`, … see them.
  sessionInit =
    home: users:
    if users == [ ] then
      ""
    else
      ''
        case "''${USER-}" in
          ${concatStringsSep "|" (map shellQuote users)})
            if [ -z "''${FORAGE_HOME-}" ]; then export FORAGE_HOME=${shellQuote home}/"$USER"; fi ;;
        esac
      '';
in
{
  inherit
    builtinTemplates
    defaults
    engines
    nixImageName
    isMountTarget
    isSandboxName
    isTemplateName
    memoryBytes
    nixStoreMount
    packageHostImage
    sandboxErrors
    sandboxUnit
    secretArgs
    sessionInit
    shellCommand
    shellQuote
    templateData
    templateErrors
    templateText
    upArgs
    userErrors
    networkErrors
    workspaceKinds
    ;
}
