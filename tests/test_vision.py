"""feedline.vision: the numpy image helpers, alone and as a Loader transform."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import feedline
from feedline import vision
from feedline.errors import ConfigError, WorkerError


def _photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A smooth image with some texture: gradients plus low-amplitude noise."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    rng = np.random.default_rng(seed)
    base = np.stack([255 * yy / h, 255 * xx / w, 128 + 60 * np.sin(xx / 37 + yy / 53)], axis=2)
    return np.clip(base + rng.normal(0, 4, base.shape), 0, 255).astype(np.uint8)


def test_to_chw_and_normalize_match_the_formula() -> None:
    img = _photo(30, 40)
    chw = vision.to_chw(img)
    assert chw.shape == (3, 30, 40) and chw.dtype == np.uint8 and chw.flags.c_contiguous
    assert np.array_equal(chw[1], img[:, :, 1])
    out = vision.normalize(img)
    ref = (img.astype(np.float64) / 255 - np.array(vision.IMAGENET_MEAN)) / np.array(vision.IMAGENET_STD)
    assert out.dtype == np.float32 and out.shape == (3, 30, 40) and out.flags.c_contiguous
    np.testing.assert_allclose(out, ref.transpose(2, 0, 1), atol=1e-5)
    grey = vision.normalize(img[:, :, 0], mean=[0.5], std=[0.25])
    np.testing.assert_allclose(grey[0], (img[:, :, 0] / 255 - 0.5) / 0.25, atol=1e-5)


# the heavy downscale (a 12-megapixel photo to 224x224, 13x and 18x) at a quarter of its pixels: the
# same ratios, without 4 s of CPU making the synthetic 3000x4000 photo
@pytest.mark.parametrize(("src", "dst"), [((240, 320), (224, 224)), ((1500, 2000), (112, 112)),
                                          ((100, 80), (300, 240)), ((481, 641), (37, 53))])
def test_resize_agrees_with_pillow(src: tuple[int, int], dst: tuple[int, int]) -> None:
    img = _photo(*src)
    ours = vision.resize(img, dst)
    assert ours.shape == (*dst, 3) and ours.dtype == np.uint8
    pil = np.asarray(Image.fromarray(img).resize((dst[1], dst[0]), Image.BILINEAR))
    diff = np.abs(ours.astype(int) - pil.astype(int))
    assert diff.mean() < 2.0 and np.percentile(diff, 99) < 10, (diff.mean(), diff.max())


def test_resize_keeps_a_constant_image_and_same_size_copies() -> None:
    flat = np.full((50, 70, 3), 77, np.uint8)
    assert (vision.resize(flat, (13, 9)) == 77).all()
    same = vision.resize(flat, (50, 70))
    assert np.array_equal(same, flat) and not np.shares_memory(same, flat)


def test_random_resized_crop_boxes_stay_inside_and_cover_the_scale() -> None:
    rng = np.random.default_rng(0)
    for h, w in [(240, 320), (320, 240), (17, 900), (5, 5), (1, 1)]:
        for _ in range(200):
            top, left, ch, cw = vision.crop_box(h, w, rng, scale=(0.3, 0.9))
            assert top >= 0 and top + ch <= h and left >= 0 and left + cw <= w and ch and cw
    areas = [vision.crop_box(300, 300, rng, scale=(0.3, 0.9)) for _ in range(300)]
    fracs = np.array([ch * cw / 90000 for _, _, ch, cw in areas])
    assert fracs.min() > 0.27 and fracs.max() < 0.93 and fracs.std() > 0.1


def test_random_helpers_follow_the_given_rng() -> None:
    img = _photo(240, 320)
    a = vision.random_resized_crop(img, 64, rng=np.random.default_rng(5))
    b = vision.random_resized_crop(img, 64, rng=np.random.default_rng(5))
    c = vision.random_resized_crop(img, (64, 32), rng=np.random.default_rng(6))
    assert np.array_equal(a, b) and a.shape == (64, 64, 3) and c.shape == (64, 32, 3)
    assert np.array_equal(vision.hflip(img), img[:, ::-1])
    assert vision.random_hflip(img, p=0.0) is img
    assert np.array_equal(vision.random_hflip(img, p=1.0), img[:, ::-1])
    flips = [vision.random_hflip(img, rng=np.random.default_rng(i)) is not img for i in range(200)]
    assert 60 < sum(flips) < 140


def test_center_crop_is_a_central_view() -> None:
    img = _photo(10, 12)
    crop = vision.center_crop(img, (4, 6))
    assert np.array_equal(crop, img[3:7, 3:9]) and np.shares_memory(crop, img)
    with pytest.raises(ConfigError, match="exceeds"):
        vision.center_crop(img, 11)


@pytest.mark.parametrize(("call", "error"), [
    (lambda: vision.to_chw([[1, 2]]), TypeError),
    (lambda: vision.to_chw(np.zeros((4, 4, 3), np.float32)), ConfigError),
    (lambda: vision.to_chw(np.zeros((0, 4, 3), np.uint8)), ConfigError),
    (lambda: vision.resize(np.zeros((4, 4, 3), np.uint8), 0), ConfigError),
    (lambda: vision.resize(np.zeros((4, 4, 3), np.uint8), (2, 2, 2)), ConfigError),
    (lambda: vision.normalize(np.zeros((4, 4, 3), np.uint8), std=(0, 1, 1)), ConfigError),
    (lambda: vision.normalize(np.zeros((4, 4, 3), np.uint8), mean=(0.5, 0.5)), ConfigError),
    (lambda: vision.random_hflip(np.zeros((4, 4, 3), np.uint8), p=2), ConfigError),
    (lambda: vision.random_resized_crop(np.zeros((4, 4, 3), np.uint8), 2, scale=(0.5, 2)),
     ConfigError),
    (lambda: vision.ImageTransform("", 8), ConfigError),
    (lambda: vision.ImageTransform((), 8), ConfigError),
    (lambda: vision.ImageTransform("jpg", 8, out=""), ConfigError),
    (lambda: vision.ImageTransform("jpg", 8, std=(1, 0, 1)), ConfigError),
    (lambda: vision.ImageTransform("jpg", 8)({"png": np.zeros((4, 4, 3), np.uint8)}), ConfigError),
])
def test_bad_input_is_a_clear_error(call, error) -> None:
    with pytest.raises(error):
        call()


def test_to_rgb_handles_grey_alpha_and_rgb() -> None:
    grey = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert np.array_equal(vision.to_rgb(grey), np.repeat(grey[:, :, None], 3, axis=2))
    rgba = np.zeros((3, 4, 4), np.uint8)
    rgba[..., 3] = 255
    assert vision.to_rgb(rgba).shape == (3, 4, 3) and vision.to_rgb(rgba).max() == 0
    la = np.stack([grey, np.full_like(grey, 255)], axis=2)
    assert np.array_equal(vision.to_rgb(la)[..., 2], grey)
    rgb = np.zeros((3, 4, 3), np.uint8)
    assert vision.to_rgb(rgb) is rgb


def test_transform_takes_the_first_present_of_several_fields() -> None:
    tf = vision.ImageTransform(("jpg", "png"), size=8, out="image")
    from_png = tf({"png": np.zeros((20, 30, 4), np.uint8), "cls": 2, "__key__": "a"})
    from_jpg = tf({"jpg": np.zeros((30, 20), np.uint8), "cls": 1})
    assert set(from_png) == {"image", "cls", "__key__"} and set(from_jpg) == {"image", "cls"}
    assert from_png["image"].shape == from_jpg["image"].shape == (3, 8, 8)
    with pytest.raises(ConfigError, match="'jpg' or 'png'"):
        tf({"txt": "x"})


def test_eval_transform_is_deterministic_and_centred() -> None:
    tf = vision.ImageTransform("jpg", size=32, train=False, mean=None)
    img = _photo(240, 320)
    out = tf({"jpg": img, "__key__": "a", "cls": 1})
    assert out["jpg"].shape == (3, 32, 32) and out["jpg"].dtype == np.uint8 and out["cls"] == 1
    assert np.array_equal(out["jpg"], tf({"jpg": img, "__key__": "a"})["jpg"])


class PhoneFolder:
    """A user's dataset the helpers were not designed for: JPEG phone photos, 95%
    landscape 320x240 and 5% portrait 240x320, decoded with Pillow in __getitem__."""

    def __init__(self, n: int) -> None:
        self.blobs = []
        for i in range(n):
            img = _photo(*((320, 240) if i % 20 == 7 else (240, 320)), seed=i)
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=85)
            self.blobs.append(buf.getvalue())

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> dict:
        img = np.asarray(Image.open(io.BytesIO(self.blobs[i])).convert("RGB"))
        return {"image": img, "label": i % 3}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_transform_gives_dense_normalised_batches_of_mixed_orientation(worker_type: str) -> None:
    ds = PhoneFolder(40)
    tf = vision.ImageTransform("image", size=(48, 64))
    loader = feedline.Loader(ds, batch_size=8, transform=tf, seed=0, workers=2,
                             worker_type=worker_type, shuffle=False, drop_last=False)
    batches = list(loader)
    assert len(batches) == 5
    for b in batches:
        assert tuple(b["image"].shape) == (8, 3, 48, 64) and str(b["image"].dtype) == "torch.float32"
        assert float(b["image"].min()) > -2.2 and float(b["image"].max()) < 2.7
    assert [int(x) for b in batches for x in b["label"]] == [i % 3 for i in range(40)]


def test_transform_error_names_the_sample() -> None:
    ds = PhoneFolder(4)
    loader = feedline.Loader(ds, batch_size=2, transform=vision.ImageTransform("jpg", 16),
                             workers=1, shuffle=False)
    with pytest.raises(WorkerError, match="no field 'jpg'"):
        next(iter(loader))


def test_sixteen_bit_images_are_scaled_to_eight_bits_not_clipped() -> None:
    deep = np.array([[0, 257, 32896], [65535, 128, 65407]], np.uint16)  # a 16-bit grey PNG's values
    rgb = vision.to_rgb(deep)
    assert rgb.dtype == np.uint8 and rgb.shape == (2, 3, 3)
    assert rgb[..., 0].tolist() == [[0, 1, 128], [255, 0, 255]] and np.array_equal(rgb[..., 0], rgb[..., 2])
    out = vision.ImageTransform("png", size=8, train=False, mean=None)({"png": np.full((20, 30), 40000, np.uint16)})
    assert out["png"].dtype == np.uint8 and out["png"].shape == (3, 8, 8) and int(out["png"].max()) == 156


def _image_and_label(sample: dict) -> tuple:
    out = vision.ImageTransform("jpg", size=16)(sample)
    return out["jpg"], out["cls"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_tuple_transform_gives_tuple_batches_for_a_tutorial_loop(tmp_path, worker_type: str) -> None:
    # a packed sample is a dict: `for images, labels in loader` raised "too many values to
    # unpack" until the docs said that a transform returning a tuple gives tuple batches
    import simplejpeg

    from feedline.format import pack

    (tmp_path / "src").mkdir()
    for i in range(12):
        img = _photo(20 + 4 * (i % 2), 30, seed=i)  # two sizes: dense only after the crop
        (tmp_path / "src" / f"{i:03d}.jpg").write_bytes(simplejpeg.encode_jpeg(img))
        (tmp_path / "src" / f"{i:03d}.cls").write_text(str(i % 4))
    pack([tmp_path / "src"], tmp_path / "ds")
    with feedline.Loader(str(tmp_path / "ds"), batch_size=4, workers=2, worker_type=worker_type,
                         shuffle=False, transform=_image_and_label) as loader:
        seen = []
        for images, labels in loader:
            assert tuple(images.shape) == (4, 3, 16, 16) and str(images.dtype) == "torch.float32"
            seen += labels.tolist()
    assert seen == [i % 4 for i in range(12)]
