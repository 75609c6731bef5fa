"""A job's owner racing the copy service (for tests/runtime/test_fleet_parts.py).

Usage: copy_racer.py MODE JOB_DIR CONTROL_DIR ROOT_FILE ROOT_DIR REL...

Runs as the job's OS account until ``CONTROL_DIR/stop`` exists, pausing (``CONTROL_DIR/paused``)
while ``CONTROL_DIR/pause`` exists, so the test can look at the job's directory between fetches.

- ``fetch``: a destination's job directory. Whatever appears at a name a copy used to write
  through (``ckpt.incoming``, ``log.incoming``, ``ckpt.old``, and any other name it does not
  know) is renamed away and replaced by a symlink to ``ROOT_FILE`` or ``ROOT_DIR``, a FIFO, or a
  directory of its own whose entries (the checkpoint's ``REL`` paths) are such links; ``ckpt``
  and ``log.txt`` are now and then renamed away (each logged as ``NAME parked-N`` in
  ``CONTROL_DIR/moves``) and replaced by a symlink or a FIFO, removed again a little later.
- ``serve``: a source's job directory. Its checkpoint's files, ``ckpt`` itself and ``log.txt``
  flip between what they are (held at ``held-N`` meanwhile) and a symlink to ``ROOT_FILE`` or
  ``ROOT_DIR``, or a FIFO.

On exit it writes its counts (``rounds``, ``parks``, ``plants``) as JSON to
``CONTROL_DIR/stats``. Standard library only, so any account's Python can run it.
"""

from __future__ import annotations

import json
import os
import random
import stat
import sys
import time

INCOMING = ("ckpt.incoming", "log.incoming", "ckpt.old")
SWAPPED = ("ckpt", "log.txt")


class Racer:
    def __init__(self, job: str, ctl: str, root_file: str, root_dir: str, rels: list[str]) -> None:
        self.job, self.ctl, self.root_file, self.root_dir, self.rels = job, ctl, root_file, root_dir, rels
        self.rng = random.Random(os.getpid())
        self.ours: set[int] = set()  # inodes of what we planted
        self.counts = {"rounds": 0, "parks": 0, "plants": 0}

    def at(self, name: str) -> str:
        return os.path.join(self.job, name)

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.lstat(self.at(name))
        except OSError:
            return None

    def park(self, name: str) -> str | None:
        new = f"parked-{self.counts['parks']}"
        try:
            os.rename(self.at(name), self.at(new))
        except OSError:
            return None
        self.counts["parks"] += 1
        return new

    def plant(self, name: str, tree: bool) -> None:
        kind = (self.rng.choices(["dir", "file", "tree", "fifo"], [3, 3, 3, 1])[0] if tree
                else self.rng.choice(["dir", "file", "fifo"]))
        path = self.at(name)
        try:
            if kind == "fifo":
                os.mkfifo(path)
            elif kind == "tree":
                os.mkdir(path)
                for rel in self.rels:
                    parts = rel.split("/")
                    if len(parts) > 1 and self.rng.random() < 0.5:  # a directory that is a link
                        link = os.path.join(path, parts[0])
                        if not os.path.lexists(link):
                            os.symlink(self.root_dir, link)
                        continue
                    os.makedirs(os.path.join(path, *parts[:-1]), exist_ok=True)
                    os.symlink(self.root_file, os.path.join(path, rel))
            else:
                os.symlink(self.root_dir if kind == "dir" else self.root_file, path)
        except OSError:
            return
        st = self.lstat(name)
        if st is not None:
            self.ours.add(st.st_ino)
            self.counts["plants"] += 1

    def fetch_round(self) -> None:
        names = list(INCOMING)
        if self.counts["rounds"] % 50 == 0:  # (listing a directory of parked entries is slow)
            names += [n for n in os.listdir(self.job) if n not in INCOMING + SWAPPED
                      and not n.startswith(("parked-", "held-"))]
        for name in names:
            st = self.lstat(name)
            if st is None:
                if self.rng.random() < 0.05:
                    self.plant(name, tree=True)
            elif st.st_ino not in self.ours or st.st_uid != os.getuid():
                self.park(name)  # the copy's: take it, put ours in its place
                self.plant(name, tree=True)
            elif self.rng.random() < 0.05:
                self.park(name)
        for name in SWAPPED:
            st = self.lstat(name)
            if st is None:
                if self.rng.random() < 0.3:
                    self.plant(name, tree=False)
            elif stat.S_ISLNK(st.st_mode) or stat.S_ISFIFO(st.st_mode):  # ours (the copy's
                # are a directory and a plain file; an inode of ours it replaced may be its next)
                if self.rng.random() < 0.3:
                    try:
                        os.unlink(self.at(name))
                    except OSError:
                        pass
            elif self.rng.random() < 0.002:
                parked = self.park(name)
                if parked is not None:
                    with open(os.path.join(self.ctl, "moves"), "a") as moves:
                        moves.write(f"{name} {parked}\n")
                    self.plant(name, tree=False)

    def serve_round(self) -> None:
        names = [*(f"ckpt/{r}" for r in self.rels), *SWAPPED]
        i = self.rng.randrange(len(names))
        name, held = names[i], f"held-{i}"
        try:
            if os.path.lexists(self.at(held)):  # ours is at the name: put the original back
                os.unlink(self.at(name))
                os.rename(self.at(held), self.at(name))
            else:
                os.rename(self.at(name), self.at(held))
                self.counts["parks"] += 1
                self.plant(name, tree=False)
        except OSError:
            pass

    def run(self, mode: str) -> None:
        stop, pause, paused = (os.path.join(self.ctl, n) for n in ("stop", "pause", "paused"))
        while not os.path.exists(stop):
            if os.path.exists(pause):
                open(paused, "w").close()
                while os.path.exists(pause) and not os.path.exists(stop):
                    time.sleep(0.001)
                os.unlink(paused)
                continue
            self.counts["rounds"] += 1
            if mode == "fetch":
                self.fetch_round()
            else:
                self.serve_round()
        with open(os.path.join(self.ctl, "stats"), "w") as f:
            json.dump(self.counts, f)


def main() -> int:
    mode, job, ctl, root_file, root_dir, *rels = sys.argv[1:]
    Racer(job, ctl, root_file, root_dir, rels).run(mode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
