#!/usr/bin/env python3
"""Gathers the licences of everything a Rigdeck package ships into one folder.

- `rust/`: every crate compiled into `rigdeck` and `rigdeck-desktop` (normal dependencies of the
  two binaries' packages for Linux x86-64, from `cargo metadata`), each crate's licence files as
  published, and `THIRD-PARTY-RUST.md` listing crate, version and licence expression;
- `ui/`: the npm packages compiled into the web UI (its dependencies and the Svelte runtime);
- `llama.cpp/`: the engine's LICENSE and its vendored licences, from the verified source tree.

A crate that publishes no licence file is listed with its expression and noted as such.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

ROOTS = ("rigdeck-server", "rigdeck-desktop")
LICENCE_PREFIXES = ("licen", "copying", "notice", "copyright", "unlicense")
UI_PACKAGES = ("svelte", "uplot", "highlight.js")


def licence_files(folder):
    """The licence-like files at the top of a package folder."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [
        os.path.join(folder, n)
        for n in names
        if n.lower().startswith(LICENCE_PREFIXES) and os.path.isfile(os.path.join(folder, n))
    ]


def shipped_crates(metadata):
    """The packages reachable from the binaries' crates over normal (not build or dev) edges."""
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    todo = [p["id"] for p in metadata["packages"] if p["name"] in ROOTS and p["source"] is None]
    seen = set()
    while todo:
        node_id = todo.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        for dep in nodes[node_id]["deps"]:
            if any(kind["kind"] is None for kind in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    return sorted((packages[i] for i in seen), key=lambda p: (p["name"], p["version"]))


def rust(out, manifest_dir):
    metadata = json.loads(
        subprocess.check_output(
            ["cargo", "metadata", "--format-version", "1", "--locked",
             "--filter-platform", "x86_64-unknown-linux-gnu"],
            cwd=manifest_dir,
        )
    )
    lines = ["# Rust crates in rigdeck and rigdeck-desktop", "",
             "| crate | version | licence | files |", "|---|---|---|---|"]
    for package in shipped_crates(metadata):
        if package["source"] is None:
            continue  # Rigdeck's own crates: LICENSE at the top of this folder's parent
        folder = os.path.dirname(package["manifest_path"])
        files = licence_files(folder)
        target = os.path.join(out, "rust", f"{package['name']}-{package['version']}")
        if files:
            os.makedirs(target, exist_ok=True)
            for file in files:
                shutil.copy(file, target)
        expression = package.get("license") or "see files"
        listed = ", ".join(os.path.basename(f) for f in files) or "none published (licence expression only)"
        lines.append(f"| {package['name']} | {package['version']} | {expression} | {listed} |")
    with open(os.path.join(out, "THIRD-PARTY-RUST.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines) - 4


def ui(out, node_modules):
    count = 0
    for name in UI_PACKAGES:
        folder = os.path.join(node_modules, name)
        files = licence_files(folder)
        if not files:
            sys.exit(f"licences: {folder} has no licence file: run `make setup` (it installs the UI's packages)")
        target = os.path.join(out, "ui", name)
        os.makedirs(target, exist_ok=True)
        for file in files:
            shutil.copy(file, target)
        count += 1
    return count


def llama_cpp(out, tree):
    files = licence_files(tree) + sorted(glob.glob(os.path.join(tree, "licenses", "*")))
    if not files:
        sys.exit(f"licences: no LICENSE in the llama.cpp tree {tree}")
    target = os.path.join(out, "llama.cpp")
    os.makedirs(target, exist_ok=True)
    for file in files:
        shutil.copy(file, target)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp-tree", required=True, help="the llama.cpp source tree the engine was built from")
    parser.add_argument("--out", required=True, help="the folder to fill (emptied first)")
    args = parser.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    crates = rust(args.out, repo)
    npm = ui(args.out, os.path.join(repo, "ui", "node_modules"))
    llama_cpp(args.out, args.llama_cpp_tree)
    print(f"licences: {crates} crates, {npm} UI packages, llama.cpp -> {args.out}")


if __name__ == "__main__":
    main()
