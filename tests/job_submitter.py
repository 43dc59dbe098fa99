"""A stand-in for KubeRay's submitter pod: one job through JobSubmissionClient, in its own process.

Its only credentials are its environment (RAY_AUTH_MODE and RAY_AUTH_TOKEN, as KubeRay injects
them into the submitter), so the test process's own Ray auth state cannot leak in. Prints one
JSON line: {"status", "logs"} when the job ran, {"error"} when the job API refused it.

    python -m tests.job_submitter http://HOST:PORT ENTRYPOINT [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("entrypoint")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)

    from ray.job_submission import JobSubmissionClient

    from tests.rayjob_support import submit_and_wait

    try:
        client = JobSubmissionClient(args.address)
        status, logs = submit_and_wait(
            client, entrypoint=args.entrypoint, runtime_env={}, timeout=args.timeout
        )
    except Exception as err:  # the refusal itself is the result being reported
        print(json.dumps({"error": f"{type(err).__name__}: {err}"}))
        return 0
    print(json.dumps({"status": status, "logs": logs}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
