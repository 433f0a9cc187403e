"""Which environment variables are secrets, and how to keep them out of files and logs."""
import re

# WANDB_API_KEY, HF_TOKEN, QE_SCORER_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, ...
_SECRET_NAME = re.compile(r"(TOKEN|_KEY$|^KEY$|SECRET|PASSWORD|PASSWD|CREDENTIAL|_AUTH$)", re.IGNORECASE)
REDACTED = "<redacted>"


def is_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def secret_values(environ: dict) -> list[str]:
    """Values of secret variables long enough to be worth scrubbing from text."""
    return sorted({v for k, v in environ.items() if is_secret(k) and len(v) >= 6}, key=len, reverse=True)


def scrub(text: str, environ: dict) -> str:
    """`text` with every secret value from `environ` replaced (e.g. a token inside a URL)."""
    for value in secret_values(environ):
        text = text.replace(value, REDACTED)
    return text
