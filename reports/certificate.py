"""certificate.json: what a run certifies, bound to the exact report.json by its SHA-256; optional OpenSSH
signatures (`ssh-keygen -Y sign` / `-Y verify`) with a key the user already has."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from . import ReportError
from .report import Loaded, clock_skew, load, outcome

CERTIFICATE_VERSION = 1
FILENAME = "certificate.json"
SIGNATURE = FILENAME + ".sig"
NAMESPACE = "crashproof-certificate"  # ssh-keygen -n: a signature made for this purpose only


def statement(loaded: Loaded) -> dict:
    """The certificate's content: everything it states is derived from the report it names."""
    report = loaded.report
    certified, verdict = outcome(report)
    run = report.get("run", {})
    impl = report.get("implementation", {})
    return {"certificate_version": CERTIFICATE_VERSION, "certified": certified, "verdict": verdict,
            "suite_version": report.get("suite_version"), "contract": report.get("contract"),
            "implementation": {k: impl.get(k) for k in ("identity", "command", "code", "launcher", "migrations",
                                                         "migrations_sha256", "fallbacks", "fallback_note",
                                                         "clock_offset")
                               if k in impl},
            # only where a case ran skewed, so a certificate of a run without skew reads as before
            **({"clock_skew": skew} if (skew := clock_skew(report.get("cases", [])))["cases"] else {}),
            "environment": report.get("environment"), "summary": report.get("summary"),
            "run_date": run.get("started_at"), "duration_s": run.get("duration_s"),
            "selection": run.get("selection"), "report": "report.json",
            "report_sha256": hashlib.sha256(loaded.raw).hexdigest()}


class Certificate:
    name, filename = "certificate", FILENAME

    def render(self, loaded: Loaded) -> str:
        return json.dumps(statement(loaded), indent=1, default=str) + "\n"


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if not found:
        raise ReportError("ssh-keygen not found; install OpenSSH's client (apt-get install openssh-client)")
    return found


def sign(directory: Path, key: Path) -> Path:
    """Sign DIR/certificate.json with an SSH private key; writes certificate.json.sig beside it."""
    certificate = Path(directory) / FILENAME
    if not certificate.exists():
        raise ReportError(f"no {FILENAME} in {directory}; `crashproof report render {directory}` first")
    if not Path(key).exists():
        raise ReportError(f"no key at {key}; name an SSH private key (ssh-keygen -t ed25519 makes one)")
    signature = certificate.with_name(SIGNATURE)
    signature.unlink(missing_ok=True)  # ssh-keygen refuses to overwrite
    done = subprocess.run([_ssh_keygen(), "-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE, str(certificate)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ReportError(f"ssh-keygen -Y sign failed: {done.stderr.strip() or done.stdout.strip()}")
    return signature


def _check_signature(certificate: Path, allowed_signers: Path, signer: str) -> str:
    if not Path(allowed_signers).exists():
        raise ReportError(f"no allowed-signers file at {allowed_signers}")
    signature = certificate.with_name(SIGNATURE)
    if not signature.exists():
        raise ReportError(f"no {SIGNATURE} beside {certificate}: the certificate is not signed")
    with certificate.open("rb") as message:
        done = subprocess.run([_ssh_keygen(), "-Y", "verify", "-f", str(allowed_signers), "-I", signer,
                               "-n", NAMESPACE, "-s", str(signature)], stdin=message, capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise ReportError(f"the signature of {certificate} does not verify for {signer}: "
                          f"{said[-1] if said else 'rejected'}")
    return (done.stdout or done.stderr).strip()


def verify(directory: Path, allowed_signers: Path | None = None, signer: str | None = None) -> list[str]:
    """Check DIR/certificate.json against DIR/report.json (and its signature when allowed signers are given).
    Returns what was checked; raises ReportError naming the first mismatch."""
    directory = Path(directory)
    path = directory / FILENAME
    try:
        stated = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"no {FILENAME} in {directory}; `crashproof report render {directory}` makes one") from None
    except ValueError as exc:
        raise ReportError(f"{path} is not JSON ({exc})") from None
    loaded = load(directory)
    actual = hashlib.sha256(loaded.raw).hexdigest()
    if stated.get("report_sha256") != actual:
        raise ReportError(f"report.json in {directory} is not the report this certificate certifies: its SHA-256 is "
                          f"{actual}, the certificate names {stated.get('report_sha256')}")
    derived = statement(loaded)
    for key, value in derived.items():
        if json.dumps(stated.get(key), sort_keys=True, default=str) != json.dumps(value, sort_keys=True, default=str):
            raise ReportError(f"{path}: {key} does not match report.json (the certificate was edited)")
    checked = [f"report.json SHA-256 {actual} matches",
               f"certificate states what report.json says: {derived['verdict']}"]
    if allowed_signers or signer:
        if not (allowed_signers and signer):
            raise ReportError("--allowed-signers and --signer go together: the file of trusted keys and the "
                              "principal who signed")
        checked.append(f"signature: {_check_signature(path, Path(allowed_signers), signer)}")
    elif path.with_name(SIGNATURE).exists():
        checked.append(f"{SIGNATURE} present but not checked: pass --allowed-signers FILE --signer ID")
    return checked
