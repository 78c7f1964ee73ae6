"""The IPU generations the simulator models: one :class:`ChipModel` each.

The figures are Graphcore's published per-IPU numbers; each one names its
source. Where a figure is derived (peak FLOP/s from tiles x clock x
multiply-accumulates per cycle, or a link shared by several IPUs), the
comment shows the arithmetic. The estimates built on them are rooflines:
they say what the chip could at best do, not what a compiled program does.

Example::

    >>> chip = chip_model(2)
    >>> chip.name, chip.tiles, chip.sram_per_tile // 1024
    ('Mk2 GC200', 1472, 624)
    >>> chip.memory_bytes / 2**20   # MiB
    897.0
"""
import dataclasses
from typing import Dict

__all__ = ["ChipModel", "CHIPS", "chip_model"]

_KiB = 1024
_GB = 1e9
_TB = 1e12
_TFLOPS = 1e12


@dataclasses.dataclass(frozen=True)
class ChipModel:
    """What the device model needs to know about one IPU.

    Attributes:
        version: the ``ipuVersion`` number (1, 2 or 21).
        name: marketing name of the chip.
        tiles: processor tiles per IPU.
        sram_per_tile: In-Processor Memory per tile, in bytes.
        clock_hz: tile clock.
        fp16_flops: peak float16 FLOP/s (AMP units, float16 partials).
        fp32_flops: peak float32 FLOP/s.
        memory_bandwidth: aggregate tile-memory bandwidth, bytes/s.
        exchange_bandwidth: on-chip all-to-all exchange, bytes/s.
        ipu_link_bandwidth: IPU-to-IPU (IPU-Link) bandwidth, bytes/s.
        host_bandwidth: host link bandwidth available to one IPU, bytes/s.
    """
    version: int
    name: str
    tiles: int
    sram_per_tile: int
    clock_hz: float
    fp16_flops: float
    fp32_flops: float
    memory_bandwidth: float
    exchange_bandwidth: float
    ipu_link_bandwidth: float
    host_bandwidth: float

    @property
    def memory_bytes(self) -> int:
        """Total In-Processor Memory of one IPU."""
        return self.tiles * self.sram_per_tile

    def describe(self) -> str:
        """One line: name, tiles x SRAM per tile and total memory."""
        return (f"{self.name}: {self.tiles:,} tiles x "
                f"{self.sram_per_tile // _KiB} KiB = "
                f"{self.memory_bytes / _GB:.2f} GB")

    def to_dict(self) -> Dict[str, object]:
        """The figures as plain values (for JSON)."""
        return dict(dataclasses.asdict(self),
                    memory_bytes=self.memory_bytes)


# Mk1, Colossus GC2 (ipuVersion 1).
# - Tiles, SRAM, clock: Jia et al., "Dissecting the Graphcore IPU
#   Architecture via Microbenchmarking" (Citadel, 2019), section 1: 1,216
#   tiles x 256 KiB (304 MiB per IPU) at 1.6 GHz.
# - FLOP/s: same paper, peak 124.5 TFLOP/s mixed precision and 31.1 TFLOP/s
#   single precision per IPU (= 1,216 tiles x 1.6 GHz x 32 resp. 8 MACs x 2).
# - Memory bandwidth 45 TB/s and exchange 8 TB/s: Graphcore C2 IPU-Processor
#   PCIe card product brief (2018), per IPU.
# - IPU-Link: the C2 brief's 2.5 Tbps card-to-card IPU-Link bandwidth,
#   ~320 GB/s.
# - Host: the C2 card's PCIe Gen4 x16 link (31.5 GB/s per direction) is
#   shared by its two IPUs: 15.75 GB/s each.
_MK1 = ChipModel(
    version=1, name="Mk1 GC2", tiles=1216, sram_per_tile=256 * _KiB,
    clock_hz=1.6e9, fp16_flops=124.5 * _TFLOPS, fp32_flops=31.1 * _TFLOPS,
    memory_bandwidth=45 * _TB, exchange_bandwidth=8 * _TB,
    ipu_link_bandwidth=320 * _GB, host_bandwidth=31.5 * _GB / 2)

# Mk2, Colossus GC200 (ipuVersion 2).
# - 1,472 tiles x 624 KiB = 897 MiB ("900MB In-Processor-Memory"), 47.5 TB/s
#   memory bandwidth, 8 TB/s all-to-all exchange, 320 GB/s IPU-Links:
#   Graphcore GC200 IPU product page and IPU-M2000 datasheet (2020).
# - FLOP/s: the M2000 datasheet's 1 PetaFLOP FP16.16 for 4 IPUs = 250
#   TFLOP/s per IPU (1,472 tiles x 1.325 GHz x 64 MACs x 2), and 62.5
#   TFLOP/s FP32 (16 MACs per tile per cycle).
# - Host: the M2000's 2 x 100 Gbps RoCEv2 host links (25 GB/s) are shared by
#   its 4 IPUs: 6.25 GB/s each.
_MK2 = ChipModel(
    version=2, name="Mk2 GC200", tiles=1472, sram_per_tile=624 * _KiB,
    clock_hz=1.325e9, fp16_flops=250 * _TFLOPS, fp32_flops=62.5 * _TFLOPS,
    memory_bandwidth=47.5 * _TB, exchange_bandwidth=8 * _TB,
    ipu_link_bandwidth=320 * _GB, host_bandwidth=25 * _GB / 4)

# Bow IPU (ipuVersion 21): the GC200 die stacked with a power-delivery wafer,
# clocked at 1.85 GHz.
# - 1,472 tiles x 624 KiB, 350 TFLOP/s FP16.16, 87.5 TFLOP/s FP32, 65 TB/s
#   memory bandwidth, 320 GB/s IPU-Links: Graphcore Bow IPU product page and
#   Bow-2000 datasheet (2022).
# - Exchange: not published separately; the GC200's 8 TB/s scaled by the
#   clock (1.85 / 1.325), 11.2 TB/s.
# - Host: the Bow-2000 keeps the M2000's 2 x 100 Gbps links for 4 IPUs.
_BOW = ChipModel(
    version=21, name="Bow IPU", tiles=1472, sram_per_tile=624 * _KiB,
    clock_hz=1.85e9, fp16_flops=350 * _TFLOPS, fp32_flops=87.5 * _TFLOPS,
    memory_bandwidth=65 * _TB, exchange_bandwidth=8 * _TB * 1.85 / 1.325,
    ipu_link_bandwidth=320 * _GB, host_bandwidth=25 * _GB / 4)

#: The chip model of each ``ipuVersion``.
CHIPS: Dict[int, ChipModel] = {chip.version: chip
                               for chip in (_MK1, _MK2, _BOW)}


def chip_model(version: int) -> ChipModel:
    """The :class:`ChipModel` of ``ipuVersion(version)``.

    Raises:
        ValueError: an unknown version (the valid ones are listed).
    """
    if isinstance(version, bool) or version not in CHIPS:
        raise ValueError(f"Unknown IPU version {version!r}: valid IPU "
                         f"versions are {', '.join(map(str, CHIPS))} "
                         "(21 is Bow)")
    return CHIPS[version]
