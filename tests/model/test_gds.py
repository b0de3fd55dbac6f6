import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedline.errors import AlignmentError, FeedlineError
from feedline.model import GPUDirectStoragePipeline, check_alignment


def test_seed_check_code_verbatim():
    # The check code of seed 001, unchanged.
    pipeline = GPUDirectStoragePipeline(gpu_id=0, alignment_bytes=4096)

    # 1. 验证对齐检测
    # 合法请求：全部 4096 字节对齐
    valid, _ = pipeline.validate_alignment(file_offset=8192, buffer_address=16384, size_bytes=4096 * 10)
    assert valid == True  # noqa: E712

    # 非法请求：地址未对齐 (16385)
    valid, reason = pipeline.validate_alignment(file_offset=8192, buffer_address=16385, size_bytes=4096)
    assert valid == False and "buffer_address" in reason  # noqa: E712

    # 2. 任务入队
    pipeline.enqueue_read("sample_cam_0", file_offset=0, buffer_address=4096, size_bytes=4096 * 5)  # 20480 字节
    pipeline.enqueue_read("sample_cam_1", file_offset=40960, buffer_address=8192, size_bytes=4096 * 5)  # 20480 字节
    assert len(pipeline.pending_queue) == 2

    # 3. 模拟硬件 DMA 传输：假设本次硬件传输能力为 25000 字节 (足以完成 sample_cam_0，但 sample_cam_1 需留在队列)
    done = pipeline.step_pipeline(max_bytes_transferred=25000)
    assert done == ["sample_cam_0"]
    assert len(pipeline.pending_queue) == 1
    assert pipeline.pending_queue[0]["sample_id"] == "sample_cam_1"

    # 再次传输完成剩余任务
    done2 = pipeline.step_pipeline(max_bytes_transferred=30000)
    assert done2 == ["sample_cam_1"]
    assert len(pipeline.pending_queue) == 0


def test_seed_solution_positional_calls():
    pipeline = GPUDirectStoragePipeline(gpu_id=0, alignment_bytes=4096)
    assert pipeline.validate_alignment(8192, 16384, 40960) == (True, None)
    pipeline.enqueue_read("sample_cam_0", 0, 4096, 20480)
    pipeline.enqueue_read("sample_cam_1", 40960, 8192, 20480)
    assert pipeline.step_pipeline(25000) == ["sample_cam_0"]
    assert pipeline.step_pipeline(30000) == ["sample_cam_1"]
    assert [r["sample_id"] for r in pipeline.completed_samples] == ["sample_cam_0", "sample_cam_1"]
    assert pipeline.completed_samples[1] == {
        "sample_id": "sample_cam_1",
        "file_offset": 40960,
        "buffer_address": 8192,
        "size_bytes": 20480,
    }
    assert pipeline.bytes_completed == 40960 and pipeline.bytes_pending == 0


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((1, 4096, 4096), "file_offset"),
        ((4096, 16385, 4096), "buffer_address"),
        ((4096, 4096, 100), "size_bytes"),
        ((-4096, 4096, 4096), "file_offset"),
        ((0, -4096, 4096), "buffer_address"),
        ((0, 0, -4096), "size_bytes"),
    ],
)
def test_reason_names_the_offending_field(args, field):
    ok, reason = check_alignment(*args)
    assert not ok and reason is not None
    assert reason.startswith("GDS alignment violated: " + field)
    others = [f for f in ("file_offset", "buffer_address", "size_bytes") if f != field]
    assert all(o not in reason for o in others)


def test_reason_text_is_exact():
    assert check_alignment(8192, 16385, 4096) == (
        False,
        "GDS alignment violated: buffer_address (16385) is not a multiple of 4096",
    )
    assert check_alignment(0, 0, -4096)[1] == "GDS alignment violated: size_bytes (-4096) is negative"


def test_zero_is_aligned_and_custom_alignment():
    assert check_alignment(0, 0, 0) == (True, None)
    assert check_alignment(512, 1024, 512, alignment=512) == (True, None)
    assert not check_alignment(512, 1024, 512, alignment=4096)[0]


@given(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([1, 512, 4096, 65536]),
)
def test_alignment_rule_matches_arithmetic(off, addr, size, align):
    ok, reason = check_alignment(off, addr, size, align)
    expected = all(v >= 0 and v % align == 0 for v in (off, addr, size))
    assert ok == expected
    assert (reason is None) == expected


@pytest.mark.parametrize("bad", [4096.0, "4096", None, True])
def test_non_int_fields_raise_type_error(bad):
    with pytest.raises(TypeError, match="size_bytes"):
        check_alignment(0, 0, bad)


@pytest.mark.parametrize("align", [0, -4096])
def test_bad_alignment_argument(align):
    with pytest.raises(ValueError, match="alignment"):
        check_alignment(0, 0, 0, alignment=align)
    with pytest.raises(ValueError, match="alignment"):
        GPUDirectStoragePipeline(alignment_bytes=align)


def test_enqueue_misaligned_raises_typed_error_and_queues_nothing():
    p = GPUDirectStoragePipeline()
    with pytest.raises(AlignmentError) as info:
        p.enqueue_read("s0", 4096, 4097, 4096)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, FeedlineError)
    assert err.field == "buffer_address" and err.key == "s0"
    assert "4096" in (err.fix or "")
    assert p.pending_queue == []


def test_step_completes_whole_requests_in_order_within_budget():
    p = GPUDirectStoragePipeline()
    for i, pages in enumerate([1, 3, 1, 2]):
        p.enqueue_read(f"s{i}", 0, 0, 4096 * pages)
    # 4 pages: s0 (1) + s1 (3) fit exactly; s2 must wait even though budget order matters.
    assert p.step_pipeline(4096 * 4) == ["s0", "s1"]
    # Budget is not carried over: 0.5 page moves nothing.
    assert p.step_pipeline(2048) == []
    # s2 (1 page) fits, s3 (2 pages) does not fit in the remaining 1.5 pages: in order, no skip.
    assert p.step_pipeline(4096 * 2.5) == ["s2"]
    assert p.step_pipeline(4096 * 2) == ["s3"]
    assert p.step_pipeline(10**9) == []
    assert p.bytes_completed == 4096 * 7


def test_large_request_blocks_later_small_ones():
    p = GPUDirectStoragePipeline()
    p.enqueue_read("big", 0, 0, 4096 * 10)
    p.enqueue_read("small", 0, 0, 4096)
    assert p.step_pipeline(4096 * 5) == []
    assert [r["sample_id"] for r in p.pending_queue] == ["big", "small"]


@pytest.mark.parametrize("budget", [-1, float("nan"), float("inf")])
def test_bad_budget(budget):
    with pytest.raises(ValueError, match="max_bytes_transferred"):
        GPUDirectStoragePipeline().step_pipeline(budget)


def test_bad_gpu_id():
    with pytest.raises(ValueError, match="gpu_id"):
        GPUDirectStoragePipeline(gpu_id=-1)
    with pytest.raises(TypeError, match="gpu_id"):
        GPUDirectStoragePipeline(gpu_id="0")  # type: ignore[arg-type]
