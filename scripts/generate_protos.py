"""Regenerate the Python code for protos/ into sdk/parity/api and sdk/parity/clients/generated.

Usage: python scripts/generate_protos.py [--out DIR]

The proto folder layout matches the Python package (`parity/api/<area>/v1`), so
protoc's imports are correct as generated and nothing is post-processed. The typed
clients belong to the client layer above it: `parity/clients/generated/<area>.py`, a
method per RPC of the area's service, a sync client over parity.clients.base and an
asyncio one over parity.clients.aio. The staleness test runs this into a temporary
folder and diffs it with the tree.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"
SDK_ROOT = REPO_ROOT / "sdk"
GENERATED_PACKAGE = Path("parity") / "api"
CLIENT_PACKAGE = Path("parity") / "clients" / "generated"
GENERATED_NOTE = "Generated from protos/ by scripts/generate_protos.py. Do not edit."
PACKAGE_DOCSTRING = f'"""{GENERATED_NOTE}"""\n'


def proto_files() -> list[Path]:
    return sorted(
        p.relative_to(PROTO_ROOT) for p in (PROTO_ROOT / GENERATED_PACKAGE).rglob("*.proto")
    )


def generate(out_root: Path) -> None:
    """Write the generated packages `parity/api` and `parity/clients/generated` under out_root, replacing old ones."""
    for package in (GENERATED_PACKAGE, CLIENT_PACKAGE):
        if (out_root / package).exists():
            shutil.rmtree(out_root / package)
        (out_root / package).mkdir(parents=True)
    well_known_types = str(files("grpc_tools") / "_proto")
    sources = [str(p) for p in proto_files()]
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known_types}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    descriptor_set = out_root / "descriptors.pb"
    if (
        protoc.main([args[0], args[1], args[2], f"--descriptor_set_out={descriptor_set}", *sources])
        != 0
    ):
        raise SystemExit("protoc failed writing descriptors")
    files_proto = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes())
    descriptor_set.unlink()
    for file_proto in files_proto.file:
        if file_proto.service:
            path = out_root / CLIENT_PACKAGE / f"{client_module(file_proto)}.py"
            if path.exists():
                raise SystemExit(
                    f"{file_proto.name}: a second file of services for {path.name}; one per area"
                )
            path.write_text(render_clients(file_proto))
    api = out_root / GENERATED_PACKAGE
    for package_dir in [
        api,
        *sorted(p for p in api.rglob("*") if p.is_dir()),
        out_root / CLIENT_PACKAGE,
    ]:
        (package_dir / "__init__.py").write_text(PACKAGE_DOCSTRING)


def client_module(file_proto: descriptor_pb2.FileDescriptorProto) -> str:
    """The area of `parity.api.<area>.v1`. Only v1 exists; a second version would need its own module names."""
    _, _, area, version = file_proto.package.split(".")
    if version != "v1":
        raise SystemExit(f"{file_proto.name}: typed clients are generated for v1 packages only")
    return area


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def render_clients(file_proto: descriptor_pb2.FileDescriptorProto) -> str:
    """Typed clients for each service of the file: one method per unary or server-streaming RPC, and in the
    sync client one per bidirectional stream (a StreamCall the caller can cancel from another thread)."""
    module = Path(file_proto.name).stem
    bidi = any(
        m.client_streaming and m.server_streaming for s in file_proto.service for m in s.method
    )
    package = file_proto.package
    services = ", ".join(f"`{package}.{service.name}`" for service in file_proto.service)
    lines = [
        f'"""Typed clients for {services}. {GENERATED_NOTE}"""',
        "",
        "from __future__ import annotations",
        "",
        f"from collections.abc import AsyncIterator, {'Iterable, ' if bidi else ''}Iterator",
        "",
        f"from {package} import {module}_pb2 as pb",
        f"from {package} import {module}_pb2_grpc as pb_grpc",
        "from parity.clients.aio import AsyncServiceClient",
        f"from parity.clients.base import ServiceClient{', StreamCall' if bidi else ''}",
    ]
    for service in file_proto.service:
        lines += _clients(service)
    return "\n".join(lines) + "\n"


def _clients(service: descriptor_pb2.ServiceDescriptorProto) -> list[str]:
    client = service.name.removesuffix("Service") + "Client"
    lines = [
        "",
        "",
        f"class {client}(ServiceClient):",
        f'    """{service.name} over a shared channel. Unary calls have a deadline and are retried on',
        '    UNAVAILABLE; every method raises parity.RPCError on failure."""',
        "",
        "    def __init__(self, address: str, **options: object) -> None:",
        f"        super().__init__(pb_grpc.{service.name}Stub, address, **options)  # type: ignore[arg-type]",
    ]
    lines += _methods(service, asynchronous=False)
    lines += [
        "",
        "",
        f"class Async{client}(AsyncServiceClient):",
        f'    """{service.name} for asyncio code, on a channel of its own (`await client.close()`). Unary calls',
        '    have a deadline and are retried (see parity.clients.aio); every method raises parity.RPCError."""',
        "",
        "    def __init__(self, address: str, **options: object) -> None:",
        f"        super().__init__(pb_grpc.{service.name}Stub, address, **options)  # type: ignore[arg-type]",
    ]
    lines += _methods(service, asynchronous=True)
    return lines


def _methods(service: descriptor_pb2.ServiceDescriptorProto, *, asynchronous: bool) -> list[str]:
    lines = []
    for method in service.method:
        request, response = (
            method.input_type.rsplit(".", 1)[1],
            method.output_type.rsplit(".", 1)[1],
        )
        if method.client_streaming:
            # Sync bidirectional streams only: asyncio code writes the store's calls through
            # AsyncStoreClient.call_writer(), and no client-only stream exists.
            if asynchronous or not method.server_streaming:
                continue
            lines += [
                "",
                f"    def {_snake(method.name)}(self, requests: Iterable[pb.{request}], timeout_s: float | None = None)"
                f" -> StreamCall[pb.{response}]:",
                f'        return self._bidi("{method.name}", requests, timeout_s)',
            ]
            continue
        signature = (
            f"{_snake(method.name)}(self, request: pb.{request}, timeout_s: float | None = None)"
        )
        lines.append("")
        if method.server_streaming:
            iterator = "AsyncIterator" if asynchronous else "Iterator"
            lines += [
                f"    def {signature} -> {iterator}[pb.{response}]:",
                f'        return self._stream("{method.name}", request, timeout_s)',
            ]
        elif asynchronous:
            lines += [
                f"    async def {signature} -> pb.{response}:",
                f'        return await self._unary("{method.name}", request, timeout_s)',
            ]
        else:
            lines += [
                f"    def {signature} -> pb.{response}:",
                f'        return self._unary("{method.name}", request, timeout_s)',
            ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=SDK_ROOT,
        help="root to write parity/api and parity/clients/generated into",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        # Generate aside and swap in, so a protoc error never leaves a half-written package.
        generate(Path(scratch))
        for package in (GENERATED_PACKAGE, CLIENT_PACKAGE):
            final = args.out / package
            if final.exists():
                shutil.rmtree(final)
            shutil.copytree(Path(scratch) / package, final)
    print(
        f"generated {len(proto_files())} protos into {args.out / GENERATED_PACKAGE} and their clients into {args.out / CLIENT_PACKAGE}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
