"""`bertology push CKPT REPO_ID`: the command line of `push.push_folder`."""

from __future__ import annotations

from .push import push_folder


def main(argv: list[str] | None = None) -> int:
    """`bertology push CKPT REPO_ID [--token T] [--private] [--revision R] [--commit_message M]`."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="bertology push", description="Push a Hub-format folder written by `bertology pretrain` to the Hub."
    )
    parser.add_argument("checkpoint", help="the folder (output_dir of a run, or a folder from `save_folder`)")
    parser.add_argument("repo_id", help="`namespace/name`, or `name` for the token's user")
    parser.add_argument("--token", default=None, help="write token (default: HF_TOKEN or the saved login)")
    parser.add_argument("--private", action="store_true", default=None, help="create the repository private")
    parser.add_argument("--revision", default=None, help="branch to commit to (default: main)")
    parser.add_argument("--commit_message", default="Upload model with hf_bertology")
    args = parser.parse_args(argv)
    url = push_folder(args.checkpoint, args.repo_id, args.token, args.private, args.commit_message, args.revision)
    print(url)
    return 0
