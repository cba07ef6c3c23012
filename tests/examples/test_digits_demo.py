"""The README's main job: the digits demo trains to >= 95% test accuracy and saves its plot."""

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


def test_digits_demo_reaches_95_percent_and_writes_plot(tmp_path):
    from ferro.examples import digits

    png = tmp_path / "curves.png"
    weights = tmp_path / "weights.npz"
    acc = digits.main(["--quiet", "--plot", str(png), "--save", str(weights)])
    assert acc >= 0.95
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import ferro

    model = digits.build_model()
    model.load_state_dict(ferro.load(weights))
