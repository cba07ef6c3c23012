"""ferro.save/load (npz, no pickle; hostile files refused) and in-memory data loading."""

import io
import json
import pickle
import struct
import zipfile
import zlib

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError, SerializationError
from ferro.utils.data import DataLoader, TensorDataset


def test_save_load_round_trip_of_nested_state(tmp_path):
    m = ferro.nn.Linear(3, 2)
    opt = ferro.optim.Adam(m.parameters())
    m(ferro.ones(1, 3)).sum().backward()
    opt.step()
    obj = {
        "model": m.state_dict(),
        "opt": opt.state_dict(),
        "epoch": 3,
        "note": "hi",
        "tuple": (1.5, None, True),
    }
    path = tmp_path / "ckpt.npz"
    ferro.save(obj, path)
    back = ferro.load(path)
    assert back["epoch"] == 3 and back["note"] == "hi" and back["tuple"] == (1.5, None, True)
    for k, v in m.state_dict().items():
        assert isinstance(back["model"][k], ferro.Tensor)
        np.testing.assert_array_equal(back["model"][k].numpy(), v.numpy())
    opt2 = ferro.optim.Adam(m.parameters())
    opt2.load_state_dict(back["opt"])
    assert opt2.state_dict()["state"][0]["step"] == 1


def test_save_load_round_trip_keeps_values_and_gives_native_writeable_arrays(tmp_path):
    big_endian = np.arange(6, dtype=">f8").reshape(2, 3)
    fortran = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    obj = {"be": big_endian, "f": fortran, "mask": np.array([True, False]), "t": ferro.ones(2)}
    path = tmp_path / "x.npz"
    ferro.save(obj, path)
    back = ferro.load(path)
    assert back["be"].dtype == np.float64 and back["be"].dtype.isnative
    np.testing.assert_array_equal(back["be"], big_endian)
    np.testing.assert_array_equal(back["f"], fortran)
    assert back["f"].dtype == np.int32
    np.testing.assert_array_equal(back["mask"], [True, False])
    for a in (back["be"], back["f"], back["mask"], back["t"].numpy()):
        assert a.flags.writeable


# Hostile files, built by hand. ------------------------------------------------------------------

_FLAG = []


def _set_flag():
    """What a malicious pickle would call; a file that reaches it was unpickled."""
    _FLAG.append("ran")


class _Evil:
    def __reduce__(self):
        return (_set_flag, ())


def _npy(arr, allow_pickle=False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


def _npy_raw(header: str, data: bytes = b"", version=(1, 0)) -> bytes:
    """A .npy member with a hand-written header (padded like numpy's)."""
    fmt = "<H" if version == (1, 0) else "<I"
    text = header.encode("latin1")
    pad = -(6 + 2 + struct.calcsize(fmt) + len(text) + 1) % 64
    text += b" " * pad + b"\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack(fmt, len(text)) + text + data


def _meta(root, fmt="ferro-state-v1") -> bytes:
    return _npy(np.frombuffer(json.dumps({"format": fmt, "root": root}).encode(), np.uint8))


def _zip_bytes(members) -> bytes:
    """A zip written record by record, so declared sizes, methods and offsets can lie.

    ``members``: dicts with ``name`` and ``data`` (the stored bytes), optionally ``method``,
    ``usize``/``csize`` (declared sizes), ``crc`` and ``offset`` (the central directory's).
    """
    out, central = bytearray(), bytearray()
    for m in members:
        name, data = m["name"].encode(), m["data"]
        method = m.get("method", zipfile.ZIP_STORED)
        usize, csize = m.get("usize", len(data)), m.get("csize", len(data))
        crc = m.get("crc", zlib.crc32(data))
        offset = m.get("offset", len(out))
        sizes = (method, 0, 0x21, crc, csize, usize, len(name))
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, *sizes, 0) + name + data
        central += struct.pack(
            "<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, *sizes, 0, 0, 0, 0, 0, offset
        )
        central += name
    n = len(members)
    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, len(central), len(out), 0)
    return bytes(out + central + eocd)


def _write(tmp_path, members, name="hostile.npz"):
    path = tmp_path / name
    path.write_bytes(_zip_bytes(members))
    return path


def _ferro_file(tmp_path, root, arrays: dict, extra=()):
    members = [{"name": "__ferro_meta__.npy", "data": _meta(root)}]
    members += [{"name": f"{k}.npy", "data": v} for k, v in arrays.items()]
    return _write(tmp_path, members + list(extra))


def test_hand_built_file_in_save_format_loads(tmp_path):
    # The builder itself is right: a file it writes honestly loads, so the refusals below come
    # from what each test changes, not from the builder.
    root = {"dict": [["w", {"tensor": "a0"}], ["n", {"value": 3}]]}
    path = _ferro_file(tmp_path, root, {"a0": _npy(np.arange(3.0))})
    back = ferro.load(path)
    assert back["n"] == 3 and back["w"].tolist() == [0.0, 1.0, 2.0]


def test_truncated_files_are_refused_at_every_cut(tmp_path):
    good = tmp_path / "good.npz"
    ferro.save({"w": ferro.ones(100), "b": np.zeros(3)}, good)
    data = good.read_bytes()
    for cut in (0, 4, 10, len(data) // 3, len(data) // 2, len(data) - 30, len(data) - 1):
        (tmp_path / "trunc.npz").write_bytes(data[:cut])
        with pytest.raises(SerializationError, match="trunc.npz"):
            ferro.load(tmp_path / "trunc.npz")


def test_member_data_cut_off_inside_the_file_is_refused(tmp_path):
    npy = _npy(np.arange(100.0))
    members = [
        {"name": "__ferro_meta__.npy", "data": _meta({"array": "a0"})},
        # The directory says 928 bytes; only 500 are there before the directory starts.
        {"name": "a0.npy", "data": npy[:500], "usize": len(npy), "csize": len(npy)},
    ]
    with pytest.raises(SerializationError):
        ferro.load(_write(tmp_path, members))


def test_plain_npy_pickle_and_foreign_files_are_refused(tmp_path):
    np.save(tmp_path / "plain.npy", np.ones(3))
    with pytest.raises(SerializationError, match="plain .npy"):
        ferro.load(tmp_path / "plain.npy")
    with open(tmp_path / "evil.pt", "wb") as f:
        pickle.dump({"w": _Evil()}, f)
    with pytest.raises(SerializationError, match="pickle"):
        ferro.load(tmp_path / "evil.pt")
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    with pytest.raises(SerializationError, match="not a zip"):
        ferro.load(tmp_path / "junk.npz")
    np.savez(tmp_path / "plain.npz", a=np.ones(2))
    with pytest.raises(SerializationError, match="not a file saved by ferro.save"):
        ferro.load(tmp_path / "plain.npz")
    with zipfile.ZipFile(tmp_path / "foreign.zip", "w") as z:
        z.writestr("hello.txt", "hi")
    with pytest.raises(SerializationError, match="hello.txt"):
        ferro.load(tmp_path / "foreign.zip")
    assert _FLAG == []


@pytest.mark.parametrize(
    "name", ["evil.py", "a01.npy", "a-1.npy", "../a0.npy", "a0.npy/", "a0", "A0.npy", "a0.npz"]
)
def test_members_with_foreign_names_are_refused(tmp_path, name):
    root = {"array": "a0"}
    extra = [{"name": name, "data": _npy(np.ones(2))}]
    with pytest.raises(SerializationError, match="foreign members"):
        ferro.load(_ferro_file(tmp_path, root, {"a0": _npy(np.ones(2))}, extra))


def test_duplicate_member_names_are_refused(tmp_path):
    root = {"array": "a0"}
    extra = [{"name": "a0.npy", "data": _npy(np.zeros(2))}]
    with pytest.raises(SerializationError, match="same name"):
        ferro.load(_ferro_file(tmp_path, root, {"a0": _npy(np.ones(2))}, extra))


def test_load_never_unpickles(tmp_path):
    # An object array is a pickle inside the .npy; it is refused by its header, never read.
    path = _ferro_file(
        tmp_path, {"array": "a0"}, {"a0": _npy(np.array([_Evil()], dtype=object), True)}
    )
    with pytest.raises(SerializationError, match="dtype '\\|O'"):
        ferro.load(path)
    assert _FLAG == []


@pytest.mark.parametrize(
    "descr",
    ["|O", "<U3", "|S4", "|V8", "<M8[ns]", "<m8[s]", "<f16", "<c32", "(2,)<f8", "not a dtype"],
)
def test_members_of_non_numeric_or_platform_dependent_dtypes_are_refused(tmp_path, descr):
    header = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': (1,), }}"
    path = _ferro_file(tmp_path, {"array": "a0"}, {"a0": _npy_raw(header, b"\0" * 16)})
    with pytest.raises(SerializationError, match="dtype"):
        ferro.load(path)


def test_structured_arrays_are_refused(tmp_path):
    arr = np.zeros(2, dtype=[("a", "<f4"), ("b", "<i8")])
    with pytest.raises(SerializationError, match="invalid .npy header"):
        ferro.load(_ferro_file(tmp_path, {"array": "a0"}, {"a0": _npy(arr)}))


def test_non_native_byte_order_is_converted(tmp_path):
    path = _ferro_file(tmp_path, {"tensor": "a0"}, {"a0": _npy(np.array([0.5, -2.0], dtype=">f4"))})
    t = ferro.load(path)
    assert t.dtype == np.float32 and t.numpy().dtype.isnative
    assert t.tolist() == [0.5, -2.0]
    assert (t * 2).tolist() == [1.0, -4.0]


def test_tensors_of_dtypes_ferro_does_not_hold_are_refused_but_arrays_are_kept(tmp_path):
    arrays = {"a0": _npy(np.arange(3, dtype=np.int32))}
    with pytest.raises(SerializationError, match="tensor of dtype int32"):
        ferro.load(_ferro_file(tmp_path, {"tensor": "a0"}, arrays))
    back = ferro.load(_ferro_file(tmp_path, {"array": "a0"}, arrays))
    assert back.dtype == np.int32 and back.tolist() == [0, 1, 2]


def test_bool_members_must_hold_zeros_and_ones(tmp_path):
    header = "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }"
    path = _ferro_file(tmp_path, {"array": "a0"}, {"a0": _npy_raw(header, b"\x00\x01\x07")})
    with pytest.raises(SerializationError, match="bool"):
        ferro.load(path)


@pytest.mark.parametrize(
    "header, data",
    [
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }", b""),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (True,), }", b"\0" * 8),
        ("{'descr': '<f8', 'fortran_order': 0, 'shape': (1,), }", b"\0" * 8),
        ("{'descr': '<f8', 'shape': (1,), }", b"\0" * 8),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'x': 1}", b"\0" * 8),
        ("__import__('os').system('echo hi')", b""),
        ("[1, 2]", b""),
    ],
)
def test_malformed_npy_headers_are_refused(tmp_path, header, data):
    path = _ferro_file(tmp_path, {"array": "a0"}, {"a0": _npy_raw(header, data)})
    with pytest.raises(SerializationError, match="header"):
        ferro.load(path)


def test_npy_versions_magic_and_header_size_are_checked(tmp_path):
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }"
    v3 = _npy_raw(header, b"\0" * 8, version=(3, 0))
    with pytest.raises(SerializationError, match="version"):
        ferro.load(_ferro_file(tmp_path, {"array": "a0"}, {"a0": v3}))
    with pytest.raises(SerializationError, match="not a .npy"):
        ferro.load(_ferro_file(tmp_path, {"array": "a0"}, {"a0": b"PK" + b"\0" * 100}))
    huge_header = _npy_raw(header + " " * 20_000, b"\0" * 8, version=(2, 0))
    with pytest.raises(SerializationError, match="byte .npy header"):
        ferro.load(_ferro_file(tmp_path, {"array": "a0"}, {"a0": huge_header}))


def test_zip_bomb_deflated_member_is_refused_without_decompressing(tmp_path):
    raw = _npy(np.zeros(2**22))  # 32 MiB of zeros deflate to about 32 KiB
    packed = zlib.compress(raw, 9)[2:-4]  # raw deflate stream, as zip stores it
    members = [
        {"name": "__ferro_meta__.npy", "data": _meta({"array": "a0"})},
        {"name": "a0.npy", "data": packed, "method": zipfile.ZIP_DEFLATED, "usize": len(raw)},
    ]
    members[1]["crc"] = zlib.crc32(raw)
    with pytest.raises(SerializationError, match="compressed"):
        ferro.load(_write(tmp_path, members))


def test_member_declaring_more_than_the_file_holds_is_refused_before_reading(tmp_path):
    npy = _npy(np.ones(4))
    members = [
        {"name": "__ferro_meta__.npy", "data": _meta({"array": "a0"})},
        {"name": "a0.npy", "data": npy, "usize": 2**31, "csize": 2**31},
    ]
    with pytest.raises(SerializationError, match="past the end"):
        ferro.load(_write(tmp_path, members))
    members[1].update(usize=2**30, csize=len(npy))  # stored, yet sizes differ
    with pytest.raises(SerializationError, match="declares 1073741824 bytes but stores"):
        ferro.load(_write(tmp_path, members))


def test_npy_header_declaring_a_huge_shape_is_refused_before_allocating(tmp_path):
    # 10**12 float64 would be 8 TB; the member holds 8 bytes. Reading it the way np.load does
    # would allocate the whole array first.
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (10**12,), }"
    header = header.replace("10**12", str(10**12))
    path = _ferro_file(tmp_path, {"array": "a0"}, {"a0": _npy_raw(header, b"\0" * 8)})
    with pytest.raises(SerializationError, match=r"declares shape \(1000000000000,\)"):
        ferro.load(path)


def test_member_declared_small_but_holding_more_is_read_only_to_its_declared_size(tmp_path):
    big = _npy(np.ones(10**5))
    members = [
        {"name": "__ferro_meta__.npy", "data": _meta({"array": "a0"})},
        {"name": "a0.npy", "data": big, "usize": 200, "csize": 200, "crc": zlib.crc32(big[:200])},
    ]
    with pytest.raises(SerializationError, match="holds 72 bytes of data"):
        ferro.load(_write(tmp_path, members))


def test_overlapping_members_whose_total_exceeds_the_file_are_refused(tmp_path):
    npy = _npy(np.ones(1000))
    first = {"name": "a0.npy", "data": npy}
    members = [{"name": "__ferro_meta__.npy", "data": _meta({"list": []})}, first]
    honest = _zip_bytes(members)
    offset = honest.index(b"PK\x03\x04", 1)
    # A second directory entry pointing at the same bytes as a0: each fits, together they
    # declare more than the file.
    members.append({"name": "a1.npy", "data": b"", "offset": offset})
    members[2].update(usize=len(npy), csize=len(npy))
    with pytest.raises(SerializationError, match="bytes of members in a file of"):
        ferro.load(_write(tmp_path, members))


def test_structure_deeper_than_the_limit_is_refused_and_save_refuses_it_too(tmp_path):
    deep = {"value": 1}
    for _ in range(70):
        deep = {"list": [deep]}
    with pytest.raises(SerializationError, match="deeper than 64"):
        ferro.load(_ferro_file(tmp_path, deep, {}))
    ok = {"value": 1}
    for _ in range(64):
        ok = {"list": [ok]}
    assert ferro.load(_ferro_file(tmp_path, ok, {})) is not None
    nested: list = [1]
    for _ in range(70):
        nested = [nested]
    with pytest.raises(ArgumentError, match="deeper than 64"):
        ferro.save(nested, tmp_path / "deep.npz")
    loop: list = []
    loop.append(loop)
    with pytest.raises(ArgumentError, match="contains itself"):
        ferro.save(loop, tmp_path / "loop.npz")


def test_json_nested_past_the_recursion_limit_is_refused(tmp_path):
    text = ("[" * 200_000 + "]" * 200_000).encode()
    meta = _npy(np.frombuffer(text, np.uint8))
    members = [{"name": "__ferro_meta__.npy", "data": meta}]
    with pytest.raises(SerializationError, match="not valid JSON"):
        ferro.load(_write(tmp_path, members))


@pytest.mark.parametrize(
    "root, match",
    [
        ({"value": [1, 2]}, "malformed value"),
        ({"value": {"a": 1}}, "malformed value"),
        ({"tensor": "a7"}, "missing array"),
        ({"tensor": 0}, "missing array"),
        ({"list": [{"array": "a0"}, {"array": "a0"}]}, "twice"),
        ({"list": []}, "does not use"),
        ({"code": "print(1)"}, "unknown structure entry"),
        ({"list": [1]}, "malformed structure entry"),
        ({"list": [], "tuple": []}, "malformed structure entry"),
        ({"dict": [[True, {"array": "a0"}]]}, "dict key"),
        ({"dict": [["k", {"array": "a0"}], ["k", {"value": 1}]]}, "repeated dict key"),
        ({"dict": [["k"]]}, "malformed dict"),
        ({"dict": {"k": 1}}, "malformed dict"),
        ({"tuple": "abc"}, "malformed tuple"),
    ],
)
def test_malformed_structures_are_refused(tmp_path, root, match):
    with pytest.raises(SerializationError, match=match):
        ferro.load(_ferro_file(tmp_path, root, {"a0": _npy(np.ones(1))}))


def test_structure_entry_must_be_utf8_json_bytes_of_the_known_format(tmp_path):
    def load_meta(meta_npy):
        return ferro.load(_write(tmp_path, [{"name": "__ferro_meta__.npy", "data": meta_npy}]))

    with pytest.raises(SerializationError, match="structure entry of dtype float64"):
        load_meta(_npy(np.ones(3)))
    with pytest.raises(SerializationError, match="shape"):
        load_meta(_npy(np.zeros((2, 2), np.uint8)))
    with pytest.raises(SerializationError, match="not valid JSON"):
        load_meta(_npy(np.frombuffer(b"\xff\xfe{", np.uint8)))
    with pytest.raises(SerializationError, match="unknown format"):
        load_meta(_meta({"list": []}, fmt="ferro-state-v9"))
    blob = np.frombuffer(json.dumps({"root": {"list": []}}).encode(), np.uint8)
    with pytest.raises(SerializationError, match="unexpected structure entry"):
        load_meta(_npy(blob))


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        ferro.load(tmp_path / "nope.npz")


def test_save_refuses_what_load_would_refuse(tmp_path):
    with pytest.raises(ArgumentTypeError, match="cannot save a function"):
        ferro.save({"f": lambda: 1}, tmp_path / "x.npz")
    with pytest.raises(DtypeError, match="dtype object"):
        ferro.save({"o": np.array([1, "a"], dtype=object)}, tmp_path / "x.npz")
    with pytest.raises(DtypeError, match="dtype <U1"):
        ferro.save([np.array(["a"])], tmp_path / "x.npz")
    with pytest.raises(ArgumentTypeError, match="keys must be str or int"):
        ferro.save({(1, 2): 3}, tmp_path / "x.npz")
    assert not (tmp_path / "x.npz").exists()


def test_dataloader_batches_shuffle_and_drop_last():
    x = ferro.arange(10).float()
    y = ferro.arange(10)
    ds = TensorDataset(x, y)
    assert len(ds) == 10 and ds[3][1].item() == 3
    batches = list(DataLoader(ds, batch_size=4))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    assert len(DataLoader(ds, batch_size=4, drop_last=True)) == 2
    ferro.manual_seed(0)
    order1 = np.concatenate([b[1].numpy() for b in DataLoader(ds, 3, shuffle=True)])
    ferro.manual_seed(0)
    order2 = np.concatenate([b[1].numpy() for b in DataLoader(ds, 3, shuffle=True)])
    assert np.array_equal(order1, order2) and sorted(order1) == list(range(10))
    assert not np.array_equal(order1, np.arange(10))


def test_dataloader_collates_generic_datasets():
    class Squares:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return ferro.tensor([float(i)]), i * i

    xb, yb = next(iter(DataLoader(Squares(), batch_size=5)))
    assert xb.shape == (5, 1) and yb.tolist() == [0, 1, 4, 9, 16]
