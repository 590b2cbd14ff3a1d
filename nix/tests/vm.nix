# A NixOS VM with services.forage: a declared template that runs a Nix package, a
# sandbox of it started at boot, and a git-worktree sandbox started and stopped
# through systemd (stop = `down`, which archives the work). Everything is offline:
# both images are built from the VM's own programs.
#
#   nix build .#checks.x86_64-linux.vm      (needs KVM)
{ pkgs, module }:

pkgs.testers.runNixOSTest {
  name = "forage";

  nodes.machine =
    { pkgs, ... }:
    {
      imports = [ module ];

      virtualisation = {
        memorySize = 2048;
        diskSize = 4096;
      };

      users.users.alice = {
        isNormalUser = true;
        # The module requires it (its units talk to Docker as alice), and her own
        # forage-ctl commands (list, exec, restore) need it too.
        extraGroups = [ "docker" ];
      };
      environment.systemPackages = [ pkgs.git ];

      systemd.tmpfiles.rules = [
        "d /home/alice/scratch 0755 alice users -"
        # Stands in for a file agenix or sops-nix would manage: never in the store.
        "d /run/forage-test 0700 alice users -"
        "f /run/forage-test/token 0400 alice users - s3cret"
      ];

      services.forage = {
        enable = true;

        templates.hello = {
          description = "A Nix package as the agent";
          agent = {
            package = pkgs.writeShellApplication {
              name = "hello-agent";
              runtimeInputs = [ pkgs.coreutils ];
              text = ''
                echo "hello-agent in $PWD, token of ''${#HELLO_TOKEN} characters"
                exec sleep infinity
              '';
            };
            secrets.HELLO_TOKEN = "token";
          };
          init = [ "touch .initialised" ];
          network = "none";
          resources.memory = "256m";
        };

        sandboxes.scratch = {
          template = "hello";
          workspace = "/home/alice/scratch";
          user = "alice";
          secrets.token.file = "/run/forage-test/token";
        };

        sandboxes.repo = {
          template = "shell";
          gitWorktree = "/home/alice/repo";
          user = "alice";
          autoStart = false;
        };
      };
    };

  testScript = ''
    import shlex

    def as_alice(cmd):
        return f"su - alice -c {shlex.quote(cmd)}"

    machine.wait_for_unit("multi-user.target")

    with subtest("a sandbox of a declared template comes up at boot"):
        machine.wait_for_unit("forage-sandbox-scratch.service")
        machine.succeed("docker inspect -f '{{.State.Running}}' forage-scratch | grep -qx true")
        machine.wait_until_succeeds(
            "docker logs forage-scratch 2>&1 | grep -q 'hello-agent in /workspace, token of 6 characters'",
            timeout=60,
        )
        machine.succeed("test -e /home/alice/scratch/.initialised")
        # The declared template is the file forage reads; alice's login shell has
        # FORAGE_HOME pointing at the module's state, so she sees the sandbox.
        machine.succeed(as_alice("forage-ctl templates show hello | grep -q hello-agent"))
        machine.succeed(as_alice("forage-ctl list | grep -q scratch"))
        machine.succeed("stat -c %U /var/lib/forage/alice | grep -qx alice")

    with subtest("a git-worktree sandbox starts and stops with its unit"):
        machine.succeed(as_alice(
            "git init -q repo && git -C repo -c user.name=Alice -c user.email=alice@example.com "
            "commit -q --allow-empty -m init"
        ))
        machine.succeed("systemctl start forage-sandbox-repo.service")
        machine.succeed(as_alice("git -C repo rev-parse --verify -q forage-repo"))
        machine.succeed(as_alice("forage-ctl exec repo -- sh -c 'echo work > notes.txt'"))
        machine.succeed(as_alice("forage-ctl exec repo -- git status --short | grep -q notes.txt"))

        machine.succeed("systemctl stop forage-sandbox-repo.service")
        machine.fail("docker inspect forage-repo")
        machine.fail(as_alice("git -C repo rev-parse --verify -q forage-repo"))
        # `down` archived the work: it comes back as a branch.
        machine.succeed(as_alice("forage-ctl restore repo"))
        machine.succeed(as_alice("git -C repo show forage-repo:notes.txt | grep -qx work"))

    with subtest("stopping the boot-time sandbox removes it"):
        machine.succeed("systemctl stop forage-sandbox-scratch.service")
        machine.fail("docker inspect forage-scratch")
        machine.succeed("test -e /home/alice/scratch/.initialised")
  '';
}
