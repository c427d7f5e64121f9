import shutil
from pathlib import Path

from parity.services.inference.launch_temp_dir import compile_cache_name, make_launch_temp_dir


def test_each_launch_has_its_own_temp_dir_but_the_compile_cache_outlives_it(tmp_path: Path) -> None:
    first, second = make_launch_temp_dir(tmp_path), make_launch_temp_dir(tmp_path)
    assert first != second and first.parent == second.parent == tmp_path
    (first / compile_cache_name() / "kernel.so").write_bytes(b"compiled once")
    (first / "socket").touch()
    shutil.rmtree(first)  # as the launcher removes it when vLLM stops
    assert (second / compile_cache_name() / "kernel.so").read_bytes() == b"compiled once"
    assert (tmp_path / compile_cache_name() / "kernel.so").exists()
    assert not any(path.name == "socket" for path in tmp_path.rglob("*"))
