# A small stand-in for nixpkgs' lib, module system and packages, just enough to
# evaluate nix/module.nix offline (nixpkgs cannot be fetched where .ci/run runs).
# It is not NixOS: it fills in option defaults, checks option names and value
# types roughly, resolves mkIf, and fakes packages as store paths. It catches what
# `nix-instantiate --parse` cannot (a misspelt option or lib function, an option
# read but never declared, a wrong default) and shows what the module generates.
# The real module system runs in `nix flake check` (checks.vm).
#
# When nix/module.nix starts using another lib function or package, add it here
# under the same name and with the same meaning as in nixpkgs.
#
#   import ./stub-nixos.nix { forageConfig = { config, pkgs, ... }: { services.forage = …; }; }
{
  # services.forage settings: an attribute set, or a function of { config, pkgs }.
  forageConfig,
  # users.users, as the module reads it (`group`, `extraGroups`).
  users ? { },
  # Other parts of `config` the settings may read (e.g. age.secrets).
  otherConfig ? { },
}:
let
  b = builtins;

  mkOption = attrs: attrs // { _type = "option"; };
  leaf = name: check: { inherit name check; };
  types = {
    str = leaf "string" b.isString;
    bool = leaf "boolean" b.isBool;
    int = leaf "integer" b.isInt;
    path = leaf "path" (v: b.isPath v || (b.isString v && b.substring 0 1 v == "/"));
    package = leaf "package" (v: b.isAttrs v && v ? outPath);
    either = x: y: leaf "${x.name} or ${y.name}" (v: x.check v || y.check v);
    enum = vs: leaf "one of ${b.toJSON vs}" (v: b.elem v vs);
    numbers.positive = leaf "positive number" (v: (b.isInt v || b.isFloat v) && v > 0);
    ints.between =
      lo: hi: leaf "integer between ${toString lo} and ${toString hi}" (v: b.isInt v && v >= lo && v <= hi);
    nullOr = t: {
      name = "null or ${t.name}";
      elem = t;
      kind = "nullOr";
      check = v: v == null || t.check v;
    };
    listOf = t: {
      name = "list of ${t.name}";
      elem = t;
      kind = "listOf";
      check = b.isList;
    };
    attrsOf = t: {
      name = "attribute set of ${t.name}";
      elem = t;
      kind = "attrsOf";
      check = b.isAttrs;
    };
    submodule = m: {
      name = "submodule";
      kind = "submodule";
      inherit (m) options;
      check = b.isAttrs;
    };
  };

  isOption = v: b.isAttrs v && (v._type or null) == "option";

  # The value `v` of type `t`, with submodule defaults filled in; `at` names it.
  merge =
    at: t: v:
    let
      kind = t.kind or "leaf";
    in
    if !(t.check v) then
      throw "${at}: ${b.toJSON v} is not a ${t.name}"
    else if kind == "submodule" then
      fill at t.options v
    else if kind == "nullOr" then
      (if v == null then null else merge at t.elem v)
    else if kind == "listOf" then
      b.genList (i: merge "${at}[${toString i}]" t.elem (b.elemAt v i)) (b.length v)
    else if kind == "attrsOf" then
      b.mapAttrs (n: x: merge "${at}.${n}" t.elem x) v
    else
      v;

  # Option declarations `opts` applied to the definitions `v`.
  fill =
    at: opts: v:
    let
      unknown = b.filter (n: !(opts ? ${n})) (b.attrNames v);
    in
    if unknown != [ ] then
      throw "${at}: no such option: ${b.concatStringsSep ", " unknown}"
    else
      b.mapAttrs (
        n: o:
        if isOption o then
          (
            if v ? ${n} then
              merge "${at}.${n}" o.type v.${n}
            else if o ? default then
              merge "${at}.${n}" o.type o.default
            else
              throw "${at}.${n} is used but not defined"
          )
        else
          fill "${at}.${n}" o (v.${n} or { })
      ) opts;

  lib = rec {
    inherit types mkOption;
    literalExpression = text: {
      _type = "literalExpression";
      inherit text;
    };
    mkEnableOption =
      what:
      mkOption {
        type = types.bool;
        default = false;
        description = "Whether to enable ${what}.";
      };
    mkIf = condition: content: {
      _type = "if";
      inherit condition content;
    };
    # Kept visible in the generated config (as { mkDefault = value; }) so tests
    # can see that the module proposes a value rather than forcing it.
    mkDefault = content: {
      _type = "override";
      priority = 1000;
      inherit content;
    };
    inherit (b)
      attrNames
      concatLists
      concatStringsSep
      listToAttrs
      ;
    hasPrefix = prefix: s: b.substring 0 (b.stringLength prefix) s == prefix;
    optional = cond: x: if cond then [ x ] else [ ];
    optionalAttrs = cond: as: if cond then as else { };
    filterAttrs = pred: set: listToAttrs (b.concatMap (n: if pred n set.${n} then [ (nameValuePair n set.${n}) ] else [ ]) (b.attrNames set));
    inherit (b) mapAttrs;
    nameValuePair = name: value: { inherit name value; };
    mapAttrsToList = f: set: map (n: f n set.${n}) (b.attrNames set);
    "mapAttrs'" = f: set: listToAttrs (mapAttrsToList f set);
    unique = b.foldl' (acc: x: if b.elem x acc then acc else acc ++ [ x ]) [ ];
    getExe = p: "${p}/bin/${p.meta.mainProgram}";
  };

  fakePackage = name: {
    type = "derivation";
    inherit name;
    outPath = "/nix/store/00000000000000000000000000000000-${name}";
    meta.mainProgram = name;
  };

  pkgs =
    {
      callPackage =
        _path: _args:
        fakePackage "forage-0.1.0"
        // {
          meta.mainProgram = "forage-ctl";
        };
      writeShellScript = name: text: {
        writeShellScript = name;
        inherit text;
      };
      aider-chat = fakePackage "aider-chat-0.70.0" // {
        meta.mainProgram = "aider";
      };
      # Like nixpkgs': a script that streams the image (a derivation named
      # stream-<name>), with the image's name and tag as attributes; the real tag is
      # derived from the image's contents, as this one is.
      dockerTools.streamLayeredImage =
        args:
        let
          baseName = b.baseNameOf args.name;
          contents = map (p: p.outPath) (args.contents or [ ]);
          hash = b.substring 0 32 (b.hashString "sha256" (b.toJSON (args // { inherit contents; })));
        in
        {
          type = "derivation";
          name = "stream-${baseName}";
          outPath = "/nix/store/${hash}-stream-${baseName}";
          imageName = args.name;
          imageTag = hash;
        };
    }
    // b.listToAttrs (
      map (name: {
        inherit name;
        value = fakePackage name;
      }) [
        "bashInteractive"
        "coreutils"
        "findutils"
        "gnugrep"
        "gnused"
        "gawk"
        "gnutar"
        "gzip"
        "diffutils"
        "less"
        "procps"
        "git"
      ]
    );

  module = import ../module.nix { inherit config lib pkgs; };

  settings = if b.isFunction forageConfig then forageConfig { inherit config pkgs; } else forageConfig;

  config = otherConfig // {
    services.forage = fill "services.forage" module.options.services.forage settings.services.forage;
    users.users = users;
    # The defaults of the NixOS options the module reads (Docker's `enable`
    # as the module leaves it: on for engine = "docker", otherConfig's else).
    virtualisation.docker.package = fakePackage "docker-27.5.1";
    virtualisation.docker.enable =
      (otherConfig.virtualisation.docker.enable or false)
      || (settings.services.forage.engine or "docker") == "docker";
    virtualisation.podman.package = fakePackage "podman-5.4.0";
  };

  # The NixOS options (outside services.forage) the module may define: `true` marks
  # an option, an attribute set a group of them. A misspelt one fails the evaluation.
  nixosOptions = {
    assertions = true;
    environment = {
      systemPackages = true;
      etc = true;
      extraInit = true;
    };
    systemd = {
      services = true;
      tmpfiles.settings = true;
    };
    virtualisation = {
      docker.enable = true;
      podman = {
        enable = true;
        dockerSocket.enable = true;
      };
    };
  };

  # `v` (the module's config) defines only options of `opts`.
  checkDefined =
    at: opts: v:
    if opts == true || v == null then
      v
    else if !(b.isAttrs v) then
      throw "${at}: ${b.toJSON v} defined where options are expected"
    else
      b.mapAttrs (
        n: x:
        if opts ? ${n} then
          checkDefined (if at == "" then n else "${at}.${n}") opts.${n} x
        else
          throw "${at}.${n}: no such NixOS option in the stand-in (add it to nixosOptions if NixOS has it)"
      ) v;

  # mkIf, resolved.
  resolve =
    v:
    if b.isAttrs v && (v._type or null) == "if" then
      (if v.condition then resolve v.content else null)
    else if b.isAttrs v && (v._type or null) == "override" then
      { mkDefault = resolve v.content; }
    else if b.isAttrs v && !(v ? outPath) then
      b.mapAttrs (_: resolve) v
    else if b.isList v then
      map resolve v
    else
      v;

  generated = checkDefined "" nixosOptions (resolve module.config);
in
# The module's `config` (null when services.forage is not enabled) and the
# messages of its failing assertions.
{
  config = generated;
  failedAssertions =
    if generated == null then [ ] else map (a: a.message) (b.filter (a: !a.assertion) generated.assertions);
}
