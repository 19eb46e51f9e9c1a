"""Models as TensorFlow's converter makes them, with its defaults: keras.applications architectures and small
hand-written nets, each with an open batch and with batch 1, in float32, float16-weight, dynamic-range and
full-int8 (float, int8 and uint8 I/O) flavours. Random weights, fixed seed.

Needs TensorFlow, which is never a dependency of the project: run it from a throwaway venv,

    python3 -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu tf_keras
    /tmp/tf/bin/python bench/converter_models.py --size small --out tests/models/converter   # what the tests use
    /tmp/tf/bin/python bench/converter_models.py --size full --out bench/out/converter        # bench/, not committed

``--size small`` shrinks each architecture (widths, depths, input size) through the builder keras.applications
itself uses, so the graph has the same ops and the same patterns as the full model; ``--size full`` is the real
thing at the input sizes users run on a phone. ``manifest.json`` beside the models says what each file is and
which flavours the converter refused.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

SEED = 0
FLAVOURS = ("fp32", "fp16", "dynrange", "int8", "int8io", "uint8io")


def _tf():  # imported late so that --help works without TensorFlow
    import tensorflow as tf

    return tf


# -- architectures ----------------------------------------------------------------------------------------------
# Each builder takes (keras module, size, batch) and returns a model; batch None is the open batch the converter
# keeps as shape arithmetic in the graph.

def _mobilenet_v3(keras, size: str, batch, which: str, minimalistic: bool = False):
    from keras.src.applications import mobilenet_v3

    builder = getattr(keras.applications, which)
    if size == "full":
        return builder(input_tensor=keras.Input((160, 160, 3), batch_size=batch), weights=None,
                       minimalistic=minimalistic)
    full_head = mobilenet_v3.MobileNetV3

    def narrow_head(stack_fn, last_point_ch, *args, **kwargs):  # the 1024/1280-wide head is most of the bytes
        return full_head(stack_fn, 64, *args, **kwargs)

    mobilenet_v3.MobileNetV3 = narrow_head
    try:
        return builder(input_tensor=keras.Input((32, 32, 3), batch_size=batch), alpha=0.35, weights=None,
                       classes=10, minimalistic=minimalistic)
    finally:
        mobilenet_v3.MobileNetV3 = full_head


def mobilenet_v3_small(keras, size: str, batch):
    return _mobilenet_v3(keras, size, batch, "MobileNetV3Small")


def mobilenet_v3_large(keras, size: str, batch):
    return _mobilenet_v3(keras, size, batch, "MobileNetV3Large")


def mobilenet_v3_small_minimalistic(keras, size: str, batch):
    """MobileNetV3Small(minimalistic=True): ReLU for hard-swish, no squeeze-and-excite, 3x3 depthwise only."""
    return _mobilenet_v3(keras, size, batch, "MobileNetV3Small", minimalistic=True)


def efficientnet_b0(keras, size: str, batch):
    if size == "full":
        return keras.applications.EfficientNetB0(input_tensor=keras.Input((160, 160, 3), batch_size=batch),
                                                 weights=None)
    from keras.src.applications.efficientnet import EfficientNet

    return EfficientNet(0.25, 0.25, 32, input_tensor=keras.Input((32, 32, 3), batch_size=batch), weights=None,
                        classes=10, name="efficientnet_small")


def efficientnet_v2_b0(keras, size: str, batch):
    if size == "full":
        return keras.applications.EfficientNetV2B0(input_tensor=keras.Input((160, 160, 3), batch_size=batch),
                                                   weights=None)
    from keras.src.applications.efficientnet_v2 import EfficientNetV2

    return EfficientNetV2(0.25, 0.25, 32, input_tensor=keras.Input((32, 32, 3), batch_size=batch), weights=None,
                          classes=10, name="efficientnetv2-b0")


def nasnet_mobile(keras, size: str, batch):
    if size == "full":
        return keras.applications.NASNetMobile(input_tensor=keras.Input((224, 224, 3), batch_size=batch),
                                               weights=None)
    from keras.src.applications.nasnet import NASNet

    return NASNet(input_shape=(32, 32, 3), penultimate_filters=192, num_blocks=1, stem_block_filters=8,
                  input_tensor=keras.Input((32, 32, 3), batch_size=batch), weights=None, classes=10,
                  default_size=32, name="nasnet_small")


def densenet121(keras, size: str, batch):
    if size == "full":
        return keras.applications.DenseNet121(input_tensor=keras.Input((128, 128, 3), batch_size=batch),
                                              weights=None)
    from keras.src.applications.densenet import DenseNet

    return DenseNet([1, 2, 2, 1], input_tensor=keras.Input((32, 32, 3), batch_size=batch), weights=None,
                    classes=10, name="densenet_small")


def resnet50(keras, size: str, batch):
    if size == "full":
        return keras.applications.ResNet50(input_tensor=keras.Input((128, 128, 3), batch_size=batch),
                                           weights=None)
    from keras.src.applications.resnet import ResNet
    from keras.src.applications.resnet import stack_residual_blocks_v1 as stack1

    def stacks(x):
        x = stack1(x, 8, 2, stride1=1, name="conv2")
        x = stack1(x, 16, 1, name="conv3")
        return stack1(x, 32, 1, name="conv4")

    return ResNet(stacks, False, True, input_tensor=keras.Input((32, 32, 3), batch_size=batch), weights=None,
                  classes=10, name="resnet_small")


def vit_block(keras, size: str, batch):
    """Patch embedding, two transformer blocks (LayerNormalization, MultiHeadAttention, Dense with GELU),
    a mean over the tokens and a classifier."""
    tokens, dim = (16, 32) if size == "small" else (64, 64)
    x = inp = keras.Input((tokens, dim), batch_size=batch)
    x = keras.layers.Dense(dim)(x)
    for _ in range(2):
        h = keras.layers.LayerNormalization(epsilon=1e-6)(x)
        h = keras.layers.MultiHeadAttention(num_heads=4, key_dim=dim // 4)(h, h)
        x = keras.layers.Add()([x, h])
        h = keras.layers.LayerNormalization(epsilon=1e-6)(x)
        h = keras.layers.Dense(2 * dim, activation="gelu")(h)
        h = keras.layers.Dense(dim)(h)
        x = keras.layers.Add()([x, h])
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inp, keras.layers.Dense(10, activation="softmax")(x), name="vit_block")


def unet(keras, size: str, batch):
    """Encoder-decoder with Conv2DTranspose, skip concatenations and bilinear UpSampling2D."""
    side, w = (32, 8) if size == "small" else (128, 16)
    L = keras.layers
    inp = keras.Input((side, side, 3), batch_size=batch)
    e1 = L.Conv2D(w, 3, padding="same", activation="relu")(inp)
    e2 = L.Conv2D(2 * w, 3, padding="same", activation="relu")(L.MaxPooling2D()(e1))
    b = L.Conv2D(4 * w, 3, padding="same", activation="relu")(L.MaxPooling2D()(e2))
    d2 = L.Conv2DTranspose(2 * w, 3, strides=2, padding="same")(b)
    d2 = L.Conv2D(2 * w, 3, padding="same", activation="relu")(L.Concatenate()([d2, e2]))
    d1 = L.UpSampling2D(interpolation="bilinear")(d2)
    d1 = L.Conv2D(w, 3, padding="same", activation="relu")(L.Concatenate()([d1, e1]))
    return keras.Model(inp, L.Conv2D(2, 1, activation="sigmoid")(d1), name="unet")


def yolo_head(keras, size: str, batch):
    """Two-scale detection head: nearest UpSampling2D, concatenation, sigmoid, reshape to boxes."""
    side, w, anchors, classes = (32, 8, 3, 4) if size == "small" else (160, 32, 3, 20)
    L = keras.layers
    inp = keras.Input((side, side, 3), batch_size=batch)
    x = L.Conv2D(w, 3, strides=2, padding="same", activation="swish")(inp)
    c4 = L.Conv2D(2 * w, 3, strides=2, padding="same", activation="swish")(x)
    c5 = L.Conv2D(4 * w, 3, strides=2, padding="same", activation="swish")(c4)
    up = L.UpSampling2D(interpolation="nearest")(L.Conv2D(2 * w, 1, activation="swish")(c5))
    p4 = L.Conv2D(2 * w, 3, padding="same", activation="swish")(L.Concatenate()([up, c4]))
    outs = []
    for p in (c5, p4):
        y = L.Conv2D(anchors * (5 + classes), 1)(p)
        y = L.Reshape((-1, 5 + classes))(y)
        outs.append(L.Activation("sigmoid")(y))
    return keras.Model(inp, L.Concatenate(axis=1)(outs), name="yolo_head")


def conv1d_audio(keras, size: str, batch):
    """A keyword-spotting style net on raw samples: strided Conv1D, BatchNormalization, pooling, Dense."""
    n = 1024 if size == "small" else 16000
    L = keras.layers
    x = inp = keras.Input((n, 1), batch_size=batch)
    for filters, stride in ((8, 4), (16, 2), (32, 2)):
        x = L.Conv1D(filters, 9, strides=stride, padding="same")(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU()(x)
        x = L.MaxPooling1D(2)(x)
    x = L.GlobalAveragePooling1D()(x)
    return keras.Model(inp, L.Dense(12, activation="softmax")(x), name="conv1d_audio")


def resnext(keras, size: str, batch):
    """ResNeXt bottleneck blocks: 1x1, a 3x3 grouped convolution of 8 channels a group, 1x1, projection shortcuts."""
    L = keras.layers
    side, base = (64, 64) if size == "full" else (16, 16)
    inp = keras.Input((side, side, 3), batch_size=batch)
    x = L.ReLU()(L.BatchNormalization()(L.Conv2D(base, 3, strides=2, padding="same", use_bias=False)(inp)))
    for width, stride in ((base, 1), (2 * base, 2), (2 * base, 1)):
        y = L.ReLU()(L.BatchNormalization()(L.Conv2D(width, 1, use_bias=False)(x)))
        y = L.Conv2D(width, 3, strides=stride, padding="same", groups=width // 8, use_bias=False)(y)
        y = L.ReLU()(L.BatchNormalization()(y))
        y = L.BatchNormalization()(L.Conv2D(2 * width, 1, use_bias=False)(y))
        shortcut = x if stride == 1 and x.shape[-1] == 2 * width else L.BatchNormalization()(
            L.Conv2D(2 * width, 1, strides=stride, use_bias=False)(x))
        x = L.ReLU()(L.Add()([y, shortcut]))
    return keras.Model(inp, L.Dense(10)(L.GlobalAveragePooling2D()(x)), name="resnext")


def text_cnn(keras, size: str, batch):
    """A text classifier: token Embedding, two Conv1D with ReLU, max pooling, global max pooling, Dense softmax."""
    L = keras.layers
    length, vocab = (64, 2000) if size == "full" else (16, 200)
    inp = keras.Input((length,), batch_size=batch, dtype="int32")
    x = L.Conv1D(64, 5, activation="relu")(L.Embedding(vocab, 48)(inp))
    x = L.Conv1D(64, 3, activation="relu")(L.MaxPooling1D(2)(x))
    return keras.Model(inp, L.Dense(5, activation="softmax")(L.GlobalMaxPooling1D()(x)), name="text_cnn")


def _text_rnn(keras, size: str, batch, name: str):
    seq, vocab, units = (12, 100, 8) if size == "small" else (64, 5000, 64)
    L = keras.layers
    inp = keras.Input((seq,), batch_size=batch, dtype="int32")
    x = L.Embedding(vocab, units)(inp)
    x = L.Bidirectional(L.LSTM(units, return_sequences=True))(x)
    x = L.Bidirectional(L.GRU(units))(x)
    return keras.Model(inp, L.Dense(3, activation="softmax")(x), name=name)


def bilstm_keras3(keras, size: str, batch):
    """Embedding + Bidirectional LSTM and GRU in Keras 3: the converter emits WHILE loops."""
    return _text_rnn(keras, size, batch, "bilstm_keras3")


def bilstm_tf_keras(keras, size: str, batch):
    """The same in tf_keras: the converter fuses the LSTMs into UNIDIRECTIONAL_SEQUENCE_LSTM (+ REVERSE_V2)."""
    import tf_keras

    return _text_rnn(tf_keras, size, batch, "bilstm_tf_keras")


def multi_io(keras, size: str, batch):
    """Two inputs (an image and a vector), three outputs (class scores, a regression, a feature map)."""
    side = 16 if size == "small" else 96
    L = keras.layers
    img = keras.Input((side, side, 3), batch_size=batch, name="image")
    vec = keras.Input((7,), batch_size=batch, name="features")
    x = L.Conv2D(12, 3, strides=2, padding="same", activation="relu")(img)
    fmap = L.DepthwiseConv2D(3, padding="same", activation="relu6")(x)
    g = L.GlobalAveragePooling2D()(fmap)
    h = L.Concatenate()([g, L.Dense(12, activation="tanh")(vec)])
    scores = L.Dense(5, activation="softmax", name="scores")(h)
    value = L.Dense(1, name="value")(L.Multiply()([h, L.Dense(24, activation="sigmoid")(vec)]))
    return keras.Model([img, vec], [scores, value, fmap], name="multi_io")


def mobilenet_v1(keras, size: str, batch):
    """keras.applications MobileNet: depthwise/pointwise pairs with ReLU6, ZeroPadding2D before strided convs."""
    if size == "full":
        return keras.applications.MobileNet(input_tensor=keras.Input((160, 160, 3), batch_size=batch),
                                            weights=None)
    return keras.applications.MobileNet(input_tensor=keras.Input((32, 32, 3), batch_size=batch), alpha=0.25,
                                        weights=None, classes=10)


def mobilenet_v2(keras, size: str, batch):
    """keras.applications MobileNetV2: inverted residuals, ZeroPadding2D, ReLU6, residual Add."""
    if size == "full":
        return keras.applications.MobileNetV2(input_tensor=keras.Input((160, 160, 3), batch_size=batch),
                                              weights=None)
    return keras.applications.MobileNetV2(input_tensor=keras.Input((32, 32, 3), batch_size=batch), alpha=0.35,
                                          weights=None, classes=10)


def convnext_tiny(keras, size: str, batch):
    """ConvNeXt: 4x4 patchify stem, 7x7 depthwise convs, LayerNormalization over channels, GELU, layer scale.

    The layer scale starts at 0.5 rather than Keras's 1e-6, which would leave every block an identity and hide
    the block's ops from the comparison."""
    from keras.src.applications.convnext import ConvNeXt

    if size == "full":
        return ConvNeXt([3, 3, 9, 3], [96, 192, 384, 768], layer_scale_init_value=0.5, default_size=224,
                        input_tensor=keras.Input((128, 128, 3), batch_size=batch), name="convnext_tiny")
    return ConvNeXt([1, 1, 2, 1], [8, 16, 24, 32], layer_scale_init_value=0.5, default_size=32,
                    input_tensor=keras.Input((32, 32, 3), batch_size=batch), classes=10, name="convnext_small")


def xception_like(keras, size: str, batch):
    """Xception's entry and middle flow: SeparableConv2D, strided 1x1 shortcuts with BatchNormalization,
    3x3/2 max pooling, residual Add."""
    side, w = (32, 8) if size == "small" else (149, 32)
    L = keras.layers
    inp = keras.Input((side, side, 3), batch_size=batch)
    x = L.Activation("relu")(L.BatchNormalization()(L.Conv2D(w, 3, strides=2, use_bias=False)(inp)))
    for filters in (2 * w, 4 * w):
        shortcut = L.BatchNormalization()(L.Conv2D(filters, 1, strides=2, padding="same", use_bias=False)(x))
        x = L.BatchNormalization()(L.SeparableConv2D(filters, 3, padding="same", use_bias=False)(x))
        x = L.Activation("relu")(x)
        x = L.BatchNormalization()(L.SeparableConv2D(filters, 3, padding="same", use_bias=False)(x))
        x = L.Add()([L.MaxPooling2D(3, strides=2, padding="same")(x), shortcut])
    residual = x
    for _ in range(3):
        x = L.BatchNormalization()(L.SeparableConv2D(4 * w, 3, padding="same", use_bias=False)(L.ReLU()(x)))
    x = L.GlobalAveragePooling2D()(L.Add()([x, residual]))
    return keras.Model(inp, L.Dense(10, activation="softmax")(x), name="xception_like")


def inception_like(keras, size: str, batch):
    """InceptionV3's blocks: four-branch concatenations, asymmetric 1x7/7x1 and 1x3/3x1 convs, 3x3 average
    pooling with stride 1, valid-padded strided reductions."""
    side, w = (35, 8) if size == "small" else (147, 32)
    L = keras.layers

    def conv(x, filters, kh, kw, strides=1, padding="same"):
        x = L.Conv2D(filters, (kh, kw), strides=strides, padding=padding, use_bias=False)(x)
        return L.Activation("relu")(L.BatchNormalization(scale=False)(x))

    inp = keras.Input((side, side, 3), batch_size=batch)
    x = conv(inp, w, 3, 3)
    x = L.Concatenate()([conv(x, w, 1, 1), conv(conv(x, w, 1, 1), w, 5, 5),
                         conv(conv(conv(x, w, 1, 1), w, 3, 3), w, 3, 3),
                         conv(L.AveragePooling2D(3, strides=1, padding="same")(x), w // 2, 1, 1)])
    x = L.Concatenate()([conv(x, 2 * w, 3, 3, 2, "valid"), conv(conv(x, w, 1, 1), w, 3, 3, 2, "valid"),
                         L.MaxPooling2D(3, strides=2)(x)])
    b7 = conv(conv(conv(x, w, 1, 1), w, 1, 7), w, 7, 1)
    b7dbl = conv(conv(conv(conv(x, w, 1, 1), w, 7, 1), w, 1, 7), w, 7, 1)
    x = L.Concatenate()([conv(x, w, 1, 1), b7, b7dbl,
                         conv(L.AveragePooling2D(3, strides=1, padding="same")(x), w, 1, 1)])
    b3 = conv(x, w, 1, 1)
    x = L.Concatenate()([conv(b3, w, 1, 3), conv(b3, w, 3, 1)])
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, L.Dense(10, activation="softmax")(x), name="inception_like")


def se_resnet(keras, size: str, batch):
    """Residual blocks with squeeze-and-excitation: global pooling, Dense ReLU/sigmoid, Reshape, Multiply, and a
    strided projection shortcut."""
    side, w = (32, 8) if size == "small" else (128, 32)
    L = keras.layers
    inp = keras.Input((side, side, 3), batch_size=batch)
    x = L.ReLU()(L.BatchNormalization()(L.Conv2D(w, 3, padding="same")(inp)))
    for filters, stride in ((w, 1), (2 * w, 2)):
        y = L.ReLU()(L.BatchNormalization()(L.Conv2D(filters, 3, strides=stride, padding="same")(x)))
        y = L.BatchNormalization()(L.Conv2D(filters, 3, padding="same")(y))
        s = L.GlobalAveragePooling2D()(y)
        s = L.Dense(filters // 4, activation="relu")(s)
        s = L.Reshape((1, 1, filters))(L.Dense(filters, activation="sigmoid")(s))
        y = L.Multiply()([y, s])
        if stride != 1 or filters != x.shape[-1]:
            x = L.BatchNormalization()(L.Conv2D(filters, 1, strides=stride)(x))
        x = L.ReLU()(L.Add()([x, y]))
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, L.Dense(10, activation="softmax")(x), name="se_resnet")


def text_transformer(keras, size: str, batch):
    """A text encoder: token Embedding with mask_zero, learned positions added, MultiHeadAttention under the
    padding mask, LayerNormalization, a GELU feed-forward, masked mean over tokens."""
    seq, vocab, dim = (12, 100, 16) if size == "small" else (128, 8000, 128)
    L = keras.layers
    ops = keras.ops

    class AddPositions(L.Layer):
        def build(self, input_shape):
            self.positions = self.add_weight(shape=(seq, dim), initializer="random_normal")

        def call(self, x):
            return x + self.positions

    tokens = keras.Input((seq,), batch_size=batch, dtype="int32")
    mask = L.Lambda(lambda t: ops.cast(ops.not_equal(t, 0), "float32"))(tokens)
    x = AddPositions()(L.Embedding(vocab, dim)(tokens))
    attention_mask = L.Lambda(lambda m: ops.cast(m[:, :, None] * m[:, None, :], "bool"))(mask)
    for _ in range(2):
        h = L.MultiHeadAttention(num_heads=2, key_dim=dim // 2)(x, x, attention_mask=attention_mask)
        x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, h]))
        h = L.Dense(dim, activation="relu")(L.Dense(2 * dim, activation="gelu")(x))
        x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, h]))
    pooled = L.Lambda(lambda a: ops.sum(a[0] * a[1][:, :, None], axis=1) / (ops.sum(a[1], axis=1,
                                                                                      keepdims=True) + 1.0))(
        [x, mask])
    return keras.Model(tokens, L.Dense(4, activation="softmax")(pooled), name="text_transformer")


def tcn(keras, size: str, batch):
    """A temporal convolutional network: causal Conv1D with dilations 1, 2, 4, 8 and residual connections."""
    n, w = (64, 8) if size == "small" else (1024, 32)
    L = keras.layers
    inp = keras.Input((n, 2), batch_size=batch)
    x = L.Conv1D(w, 1)(inp)
    for dilation in (1, 2, 4, 8):
        y = L.Conv1D(w, 3, padding="causal", dilation_rate=dilation, activation="relu")(x)
        y = L.Conv1D(w, 3, padding="causal", dilation_rate=dilation)(y)
        x = L.ReLU()(L.Add()([x, y]))
    return keras.Model(inp, L.Dense(3)(L.Lambda(lambda t: t[:, -1, :])(x)), name="tcn")


def rnn_keras3(keras, size: str, batch):
    """A unidirectional LSTM then GRU (unroll=False) on a float sequence in Keras 3: WHILE loops."""
    seq, units = (10, 8) if size == "small" else (50, 64)
    L = keras.layers
    inp = keras.Input((seq, 5), batch_size=batch)
    x = L.LSTM(units, return_sequences=True)(inp)
    x = L.GRU(units)(x)
    return keras.Model(inp, L.Dense(3)(x), name="rnn_keras3")


def gru_tf_keras(keras, size: str, batch):
    """tf_keras GRU and SimpleRNN (not fused by the converter, unlike its LSTM)."""
    import tf_keras

    seq, units = (10, 8) if size == "small" else (50, 64)
    L = tf_keras.layers
    inp = tf_keras.Input((seq, 5), batch_size=batch)
    x = L.GRU(units, return_sequences=True)(inp)
    x = L.SimpleRNN(units)(x)
    return tf_keras.Model(inp, L.Dense(3)(x), name="gru_tf_keras")


def _masked_rnn(keras_module, size: str, batch, layer: str, name: str):
    seq, vocab, units = (8, 50, 8) if size == "small" else (30, 1000, 48)
    L = keras_module.layers
    inp = keras_module.Input((seq,), batch_size=batch, dtype="int32")
    x = getattr(L, layer)(units)(L.Embedding(vocab, 32, mask_zero=True)(inp))
    return keras_module.Model(inp, L.Dense(4, activation="softmax")(x), name=name)


def masked_lstm(keras, size: str, batch):
    """Keras 3: Embedding with mask_zero into an LSTM: the mask becomes a SELECT in the WHILE body."""
    return _masked_rnn(keras, size, batch, "LSTM", "masked_lstm")


def masked_gru(keras, size: str, batch):
    """tf_keras: Embedding with mask_zero into a GRU (not fused by the converter): a masked WHILE loop."""
    import tf_keras

    return _masked_rnn(tf_keras, size, batch, "GRU", "masked_gru")


def stacked_gru(keras, size: str, batch):
    """Keras 3: three GRUs, each feeding the whole sequence to the next: three WHILE loops in a row."""
    seq, units = (8, 8) if size == "small" else (20, 32)
    L = keras.layers
    inp = keras.Input((seq, 6), batch_size=batch)
    x = L.GRU(units, return_sequences=True)(inp)
    x = L.GRU(units, return_sequences=True)(x)
    return keras.Model(inp, L.Dense(2)(L.GRU(units)(x)), name="stacked_gru")


def bigru_rnn(keras, size: str, batch):
    """Keras 3: a bidirectional GRU then a SimpleRNN: a reversed sequence and four WHILE loops."""
    seq, units = (8, 8) if size == "small" else (40, 32)
    L = keras.layers
    inp = keras.Input((seq, 5), batch_size=batch)
    x = L.Bidirectional(L.GRU(units, return_sequences=True))(inp)
    return keras.Model(inp, L.Dense(3)(L.SimpleRNN(units)(x)), name="bigru_rnn")


def lstm_small(keras, size: str, batch):
    """tf_keras: one LSTM of 32 units (fused into UNIDIRECTIONAL_SEQUENCE_LSTM) and a Dense: a model under 0.1 ms."""
    import tf_keras

    seq, units = (8, 8) if size == "small" else (20, 32)
    L = tf_keras.layers
    inp = tf_keras.Input((seq, 8), batch_size=batch)
    return tf_keras.Model(inp, L.Dense(4)(L.LSTM(units)(inp)), name="lstm_small")


def lstm_seq(keras, size: str, batch):
    """tf_keras: two fused LSTMs (the first returning its sequence) and a time-distributed Dense."""
    import tf_keras

    seq, units = (8, 8) if size == "small" else (40, 48)
    L = tf_keras.layers
    inp = tf_keras.Input((seq, 10), batch_size=batch)
    x = L.LSTM(units, return_sequences=True)(L.LSTM(units, return_sequences=True)(inp))
    return tf_keras.Model(inp, L.Dense(6)(x), name="lstm_seq")


def image_ops(keras, size: str, batch):
    """tf.image.resize (bilinear with align_corners, bilinear with half-pixel centres, nearest),
    space_to_depth/depth_to_space, and top_k and argmax heads beside the softmax."""
    tf = _tf()
    side, w = (16, 8) if size == "small" else (96, 32)
    L = keras.layers
    inp = keras.Input((side, side, 3), batch_size=batch)
    x = L.Conv2D(w, 3, padding="same", activation="relu")(inp)
    x = L.Lambda(lambda t: tf.nn.space_to_depth(t, 2))(x)
    x = L.Conv2D(4 * w, 1, activation="relu")(x)
    x = L.Lambda(lambda t: tf.nn.depth_to_space(t, 2))(x)
    x = L.Lambda(lambda t: tf.compat.v1.image.resize_bilinear(t, (side + 7, side + 7), align_corners=True))(x)
    x = L.Conv2D(w, 3, padding="same", activation="relu")(x)
    x = L.Lambda(lambda t: tf.image.resize(t, (side // 2 + 3, side // 2 + 3), method="bilinear"))(x)
    x = L.Lambda(lambda t: tf.image.resize(t, (side, side), method="nearest"))(x)
    logits = L.Dense(10)(L.GlobalAveragePooling2D()(L.Conv2D(w, 3, padding="same")(x)))
    probs = L.Softmax()(logits)
    top = L.Lambda(lambda t: tf.math.top_k(t, k=3))(logits)
    best = L.Lambda(lambda t: tf.math.argmax(t, axis=-1, output_type=tf.int32))(logits)
    return keras.Model(inp, [probs, top[0], top[1], best], name="image_ops")


def gather_where(keras, size: str, batch):
    """tf.where as a select and as coordinates, tf.gather along an axis, tf.gather_nd, a cumulative sum."""
    tf = _tf()
    n, w = (16, 8) if size == "small" else (256, 64)
    L = keras.layers
    inp = keras.Input((n, w), batch_size=batch)
    x = L.Dense(w)(inp)
    x = L.Lambda(lambda t: tf.where(t > 0, t, 0.1 * t))(x)
    picked = L.Lambda(lambda t: tf.gather(t, [3, 1, n - 1, 0, 3], axis=1))(x)
    corners = L.Lambda(lambda t: tf.transpose(tf.gather_nd(tf.transpose(t, [1, 2, 0]),
                                                           [[0, 0], [n - 1, w - 1], [n // 2, 1]]), [1, 0]))(x)
    positive = L.Lambda(lambda t: tf.reshape(tf.reduce_sum(tf.gather_nd(t, tf.where(t > 0.5))), [1]))(x)
    running = L.Lambda(lambda t: tf.math.cumsum(t, axis=1))(picked)
    return keras.Model(inp, [L.Dense(4)(L.Flatten()(running)), corners, positive], name="gather_where")


def spectrogram(keras, size: str, batch):
    """tf.signal.stft (framing, a Hann window, RFFT) and its magnitude, log-compressed, then a small conv net."""
    tf = _tf()
    n, frame = (512, 64) if size == "small" else (16000, 512)
    L = keras.layers
    inp = keras.Input((n,), batch_size=batch)
    x = L.Lambda(lambda t: tf.math.log(tf.abs(tf.signal.stft(t, frame, frame // 2)) + 1e-3))(inp)
    x = L.Conv2D(8, 3, activation="relu")(L.Reshape((-1, frame // 2 + 1, 1))(x))
    return keras.Model(inp, L.Dense(5)(L.GlobalAveragePooling2D()(x)), name="spectrogram")


def conv3d_net(keras, size: str, batch):
    """A video-style net: Conv3D with strides, BatchNormalization, ReLU, global pooling."""
    frames, side, w = (4, 12, 4) if size == "small" else (16, 64, 16)
    L = keras.layers
    inp = keras.Input((frames, side, side, 3), batch_size=batch)
    x = L.ReLU()(L.BatchNormalization()(L.Conv3D(w, 3, padding="same")(inp)))
    x = L.ReLU()(L.BatchNormalization()(L.Conv3D(2 * w, 3, strides=(1, 2, 2), padding="same")(x)))
    x = L.Conv3D(2 * w, (1, 3, 3), padding="valid", activation="relu")(x)
    return keras.Model(inp, L.Dense(4)(L.GlobalAveragePooling3D()(x)), name="conv3d_net")


def gan_generator(keras, size: str, batch):
    """A DCGAN generator: Dense, Reshape, strided Conv2DTranspose with BatchNormalization and LeakyReLU, tanh."""
    start, w = (4, 16) if size == "small" else (8, 128)
    L = keras.layers
    inp = keras.Input((16,), batch_size=batch)
    x = L.Reshape((start, start, 2 * w))(L.Dense(start * start * 2 * w, use_bias=False)(inp))
    x = L.LeakyReLU(0.2)(L.BatchNormalization()(x))
    x = L.LeakyReLU(0.2)(L.BatchNormalization()(L.Conv2DTranspose(w, 4, strides=2, padding="same",
                                                                  use_bias=False)(x)))
    x = L.ReLU()(L.BatchNormalization()(L.Conv2DTranspose(w // 2, 5, strides=2, padding="same")(x)))
    return keras.Model(inp, L.Conv2DTranspose(3, 3, strides=1, padding="same", activation="tanh")(x),
                       name="gan_generator")


def autoencoder(keras, size: str, batch):
    """A convolutional autoencoder: strided convs, Flatten, a Dense bottleneck, Reshape, nearest UpSampling2D,
    valid-padded Conv2DTranspose, sigmoid."""
    side, w = (16, 8) if size == "small" else (64, 32)
    L = keras.layers
    inp = keras.Input((side, side, 1), batch_size=batch)
    x = L.Conv2D(w, 3, strides=2, padding="same", activation="relu")(inp)
    x = L.Conv2D(2 * w, 3, strides=2, padding="same", activation="relu")(x)
    q = side // 4
    z = L.Dense(8, activation="elu")(L.Flatten()(x))
    x = L.Reshape((q, q, 2 * w))(L.Dense(q * q * 2 * w, activation="relu")(z))
    x = L.Conv2D(w, 3, padding="same", activation="relu")(L.UpSampling2D()(x))
    x = L.Conv2DTranspose(w, 3, strides=2, padding="valid", activation="relu")(x)
    x = L.Cropping2D(((0, 1), (0, 1)))(x)
    return keras.Model(inp, L.Conv2D(1, 3, padding="same", activation="sigmoid")(x), name="autoencoder")


ARCHITECTURES: dict[str, Callable] = {f.__name__: f for f in (
    mobilenet_v3_small, mobilenet_v3_large, efficientnet_b0, efficientnet_v2_b0, nasnet_mobile, densenet121,
    resnet50, vit_block, unet, yolo_head, conv1d_audio, bilstm_keras3, bilstm_tf_keras, multi_io,
    mobilenet_v1, mobilenet_v2, convnext_tiny, xception_like, inception_like, se_resnet, text_transformer, tcn,
    rnn_keras3, gru_tf_keras, image_ops, gather_where, spectrogram, conv3d_net, gan_generator, autoencoder,
    mobilenet_v3_small_minimalistic, resnext, text_cnn, masked_lstm, masked_gru, stacked_gru, bigru_rnn,
    lstm_small, lstm_seq)}


# -- conversion -------------------------------------------------------------------------------------------------

# keras.applications models take pixels in [0, 255] and scale them inside the graph (Rescaling/Normalization
# layers); fed normal noise their activations shrink by 255 and every output is the same softmax.
PIXEL_INPUTS = {"mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_v2_b0",
                "convnext_tiny", "mobilenet_v3_small_minimalistic"}


def input_range(name: str) -> list[float] | None:
    """[low, high] of a uniform input where the model expects pixels; None: standard normal."""
    return [0.0, 255.0] if name in PIXEL_INPUTS else None


def sample_inputs(model, rng: np.random.Generator, value_range: list[float] | None, batch: int = 1
                  ) -> list[np.ndarray]:
    out = []
    for t in model.inputs:
        shape = (batch, *t.shape[1:])
        if "int" in str(t.dtype):
            out.append(rng.integers(0, 50, shape).astype(np.int32))
        elif value_range is not None:
            out.append(rng.uniform(*value_range, shape).astype(np.float32))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


def convert(model, flavour: str, value_range: list[float] | None) -> bytes:
    tf = _tf()
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if flavour != "fp32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if flavour == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    if flavour in ("int8", "int8io", "uint8io"):
        rng = np.random.default_rng(SEED + 1)

        def representative():  # keyed by input name: the converter orders a model's inputs its own way
            for _ in range(8):
                yield {t.name: x for t, x in zip(model.inputs, sample_inputs(model, rng, value_range))}

        converter.representative_dataset = representative
    if flavour in ("int8io", "uint8io"):
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8 if flavour == "int8io" else tf.uint8
        converter.inference_output_type = converter.inference_input_type
    return converter.convert()


def calibrate_batch_norms(model, keras_module, value_range: list[float] | None) -> None:
    """Set each BatchNormalization's moving statistics to those of its input on sample data, in graph order.

    With freshly initialised statistics (mean 0, variance 1) a deep random net shrinks its activations layer by
    layer (MobileNetV3's reach 1e-10) and every output is the same softmax, which matches anything. Calibrated,
    activations stay near unit scale, as in a trained net, and the outputs say something."""
    rng = np.random.default_rng(SEED + 2)
    batch = sample_inputs(model, rng, value_range, batch=8)
    for layer in model.layers:
        if not isinstance(layer, keras_module.layers.BatchNormalization):
            continue
        probe = keras_module.Model(model.inputs, layer.input)
        x = np.asarray(probe(batch if len(batch) > 1 else batch[0], training=False), np.float64)
        axes = tuple(i for i in range(x.ndim) if i != (layer.axis if layer.axis >= 0 else x.ndim + layer.axis))
        layer.moving_mean.assign(x.mean(axes).astype(np.float32))  # by name: scale=False drops gamma
        layer.moving_variance.assign((x.var(axes) + 1e-3).astype(np.float32))


def temper_logits(model, keras_module, value_range: list[float] | None) -> None:
    """Scale the last layer with weights so its pre-activation output has a standard deviation of 2.

    Calibrated random nets end in logits of ~100, and their softmax is one-hot: an output that hides every
    difference short of a changed argmax. Logits of ~2 keep the softmax informative."""
    last = [layer for layer in model.layers if getattr(layer, "kernel", None) is not None][-1]
    activation = getattr(last, "activation", None)
    if activation is not None:
        last.activation = keras_module.activations.linear
    batch = sample_inputs(model, np.random.default_rng(SEED + 3), value_range, batch=8)
    probe = keras_module.Model(model.inputs, last.output)
    std = float(np.std(np.asarray(probe(batch if len(batch) > 1 else batch[0], training=False))))
    if activation is not None:
        last.activation = activation
    if std > 0:
        last.set_weights([w * (2.0 / std) for w in last.get_weights()])


TF_KERAS_MODELS = {"bilstm_tf_keras", "gru_tf_keras", "masked_gru", "lstm_small", "lstm_seq"}


def build(name: str, size: str, batch: int | None):
    import keras

    keras.utils.set_random_seed(SEED)
    keras_module = keras
    if name in TF_KERAS_MODELS:
        import tf_keras

        tf_keras.utils.set_random_seed(SEED)
        keras_module = tf_keras
    model = ARCHITECTURES[name](keras, size, batch)
    calibrate_batch_norms(model, keras_module, input_range(name))
    temper_logits(model, keras_module, input_range(name))
    return model


def convert_all(name: str, size: str, batch_name: str, flavours: list[str], out: Path) -> None:
    """Build one model and write each flavour's .tflite, recording each in the manifest as it goes."""
    model = build(name, size, None if batch_name == "open" else 1)
    for flavour in flavours:
        stem = f"{name}_b{batch_name}_{flavour}"
        t0 = time.perf_counter()
        try:
            content = convert(model, flavour, input_range(name))
        except Exception as e:  # the converter's refusals are facts about the model, recorded
            record(out, stem, {"architecture": name, "batch": batch_name, "flavour": flavour,
                               "refused": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
            continue
        (out / f"{stem}.tflite").write_bytes(content)
        record(out, stem, {"architecture": name, "batch": batch_name, "flavour": flavour, "size": size,
                           "bytes": len(content), "params": int(model.count_params()),
                           "input_range": input_range(name)})
        print(f"{stem}: {len(content) / 1024:.0f} KiB in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def record(out: Path, stem: str, entry: dict) -> None:
    path = out / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    manifest[stem] = entry
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    if "refused" in entry:
        print(f"{stem}: converter refused ({entry['refused']})", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for the .tflite files and manifest.json")
    ap.add_argument("--size", choices=("small", "full"), default="small")
    ap.add_argument("--only", nargs="*", default=None, help="architectures to make (default: all)")
    ap.add_argument("--flavours", nargs="*", default=list(FLAVOURS), choices=FLAVOURS)
    ap.add_argument("--batches", nargs="*", default=["open", "1"], choices=("open", "1"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        convert_all(args.only[0], args.size, args.batches[0], args.flavours, args.out)
        return 0
    # One child process per model: the converter segfaults on some (int8 calibration of a Keras 3 LSTM), which
    # must not end the run. After a crash the flavour it died on is recorded and the rest go to a new child.
    for name in args.only or ARCHITECTURES:
        for batch_name in args.batches:
            todo = list(args.flavours)
            while todo:
                status = subprocess.run([sys.executable, "-W", "ignore", __file__, "--child", "--out", str(args.out),
                                         "--size", args.size, "--only", name, "--batches", batch_name,
                                         "--flavours", *todo]).returncode
                manifest_path = args.out / "manifest.json"
                manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
                done = [f for f in todo if f"{name}_b{batch_name}_{f}" in manifest and
                        manifest[f"{name}_b{batch_name}_{f}"].get("size", args.size) == args.size]
                if status == 0:
                    break
                crashed = next(f for f in todo if f not in done)
                record(args.out, f"{name}_b{batch_name}_{crashed}",
                       {"architecture": name, "batch": batch_name, "flavour": crashed,
                        "refused": f"the converter crashed (exit status {status})"})
                todo = [f for f in todo if f not in done and f != crashed]
    return 0


if __name__ == "__main__":
    sys.exit(main())
