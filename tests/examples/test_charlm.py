"""The charlm demo: a short run learns well below the unigram entropy and writes its plot."""

import numpy as np
import pytest

import ferro

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


def test_generated_text_and_entropy():
    from ferro.examples import charlm

    text = charlm.make_text(5000, seed=1)
    assert len(text) >= 5000 and text == charlm.make_text(5000, seed=1)
    ids = np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)
    p = np.bincount(ids) / len(ids)
    p = p[p > 0]
    assert charlm.unigram_entropy(ids, 256) == pytest.approx(-(p * np.log(p)).sum())


@pytest.mark.skipif(not hasattr(ferro.nn, "LayerNorm"), reason="needs nn.LayerNorm")
def test_charlm_transformer_learns_below_unigram_entropy(tmp_path, capsys):
    from ferro.examples import charlm

    png = tmp_path / "loss.png"
    history = charlm.main(["--quiet", "--steps", "60", "--plot", str(png), "--sample", "40"])
    assert history["final"] < 0.8 * history["entropy"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "unigram entropy" in out and "sampled text:" in out


@pytest.mark.skipif(not hasattr(ferro.nn, "LSTM"), reason="needs nn.LSTM")
def test_charlm_lstm_runs(tmp_path):
    from ferro.examples import charlm

    history = charlm.main(
        [
            "--quiet",
            "--model",
            "lstm",
            "--steps",
            "30",
            "--plot",
            str(tmp_path / "l.png"),
            "--sample",
            "0",
        ]
    )
    assert history["final"] < history["entropy"]
