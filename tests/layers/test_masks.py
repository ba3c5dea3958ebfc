"""The mask convention (bool, True = may attend), pinned to literal matrices."""

import numpy as np

from layers.masks import causal_mask, decoder_self_attention_mask, padding_mask


def test_padding_mask_hides_padding_keys():
    ids = np.array([[5, 6, 0], [7, 0, 0]], dtype="int32")
    expected = np.array([[[True, True, False]], [[True, False, False]]])
    np.testing.assert_array_equal(np.asarray(padding_mask(ids)), expected)


def test_causal_mask_is_lower_triangular():
    expected = np.array(
        [[[True, False, False, False],
          [True, True, False, False],
          [True, True, True, False],
          [True, True, True, True]]]
    )
    np.testing.assert_array_equal(np.asarray(causal_mask(4)), expected)


def test_causal_mask_of_one_cached_step_sees_positions_up_to_the_step():
    np.testing.assert_array_equal(
        np.asarray(causal_mask(1, 5, offset=2)), np.array([[[True, True, True, False, False]]])
    )


def test_decoder_self_attention_mask_combines_look_ahead_and_padding():
    ids = np.array([[1, 9, 8, 0]], dtype="int32")
    expected = np.array(
        [[[True, False, False, False],
          [True, True, False, False],
          [True, True, True, False],
          [True, True, True, False]]]
    )
    np.testing.assert_array_equal(np.asarray(decoder_self_attention_mask(ids)), expected)


def test_decoder_self_attention_mask_hides_the_given_pad_id():
    ids = np.array([[1, 0, 3, 3]], dtype="int32")  # 3 pads here; 0 is a real token
    expected = np.array(
        [[[True, False, False, False],
          [True, True, False, False],
          [True, True, False, False],
          [True, True, False, False]]]
    )
    np.testing.assert_array_equal(np.asarray(decoder_self_attention_mask(ids, pad_id=3)), expected)
