"""Layout rules: the defaults, and user rules rejected with the module, variable and rule."""
import logging

import pytest

from tfx_parallel.components.distributed_trainer import sharding as S

V = S.VariableInfo
EMB = V("emb/embeddings", (7, 4), S.EMBEDDING, "emb")


def _dense(name, fan_in, units):
  return (V(f"{name}/kernel", (fan_in, units), S.DENSE_KERNEL, name),
          V(f"{name}/bias", (units,), S.DENSE_BIAS, name))


H1K, H1B = _dense("hidden_1", 5, 8)
H2K, H2B = _dense("hidden_2", 8, 4)
HEADK, HEADB = _dense("head", 4, 3)
PARITY = [EMB, H1K, H1B, H2K, H2B, HEADK, HEADB]


def test_default_rules_megatron_pairs_and_embedding_on_output_dim():
  rules = S.default_rules_for(PARITY, model_axis=2)
  assert rules == {"emb/embeddings": (None, "model"),
                   "hidden_1/kernel": (None, "model"), "hidden_1/bias": ("model",),
                   "hidden_2/kernel": ("model", None),
                   # 3 logits do not divide by 2, its 4 inputs do: a row split.
                   "head/kernel": ("model", None)}
  # A fourth Dense would start a new pair (column split).
  more = PARITY[:5] + [V("hidden_3/kernel", (4, 6), S.DENSE_KERNEL, "hidden_3"),
                       V("hidden_3/bias", (6,), S.DENSE_BIAS, "hidden_3")]
  assert S.default_rules_for(more, 2)["hidden_3/kernel"] == (None, "model")
  assert S.default_rules_for(more, 2)["hidden_3/bias"] == ("model",)


def test_linear_kernel_is_split_by_rows_with_its_bias_replicated():
  """The seed's model parallelism: a [F, 1] kernel, Y = sum_i X_i W_i."""
  kernel, bias = _dense("linear", 4, 1)
  for m in (2, 4):
    assert S.default_rules_for([kernel, bias], m) == {"linear/kernel": ("model", None)}
    assert S.resolve(S.default_rules_for([kernel, bias], m), [kernel, bias], m) == {
        "linear/kernel": ("model", None), "linear/bias": (None,)}
  # 3 does not divide 4 features (nor 1 output): replicated, and listed as such.
  rules, replicated = S.default_plan([kernel, bias], 3)
  assert rules == {} and replicated == [kernel]
  assert S.default_plan([kernel, bias], 1)[1] == []  # One device holds everything anyway.


def test_default_rule_that_does_not_divide_falls_back_to_replicated_with_one_log_line(caplog):
  head_k, head_b = _dense("head", 5, 3)
  variables = PARITY[:5] + [head_k, head_b]
  with caplog.at_level(logging.INFO, logger="absl"):
    rules, replicated = S.default_plan(variables, model_axis=2)
  assert "head/kernel" not in rules and "head/bias" not in rules
  assert replicated == [head_k]
  lines = [r.getMessage() for r in caplog.records if "head/kernel" in r.getMessage()]
  assert len(lines) == 1 and "replicated" in lines[0] and "model axis 2" in lines[0]
  # On a model axis of 3 the head splits, and the 8-wide hidden layers fall back.
  rules3 = S.default_rules_for(PARITY, model_axis=3)
  assert rules3["head/kernel"] == (None, "model") and "hidden_1/kernel" not in rules3


def test_default_rules_are_valid_and_resolve_unmatched_to_replicated():
  placed = S.resolve(S.default_rules_for(PARITY, 2), PARITY, 2)
  assert placed["head/kernel"] == ("model", None) and placed["head/bias"] == (None,)
  assert placed["hidden_2/kernel"] == ("model", None) and placed["hidden_2/bias"] == (None,)


def test_describe_variables_and_default_rules_of_a_keras_model():
  import tf_keras  # pylint: disable=g-import-not-at-top
  ids = tf_keras.Input((1,), dtype="int64", name="ids")
  h = tf_keras.layers.Flatten()(tf_keras.layers.Embedding(10, 4, name="emb")(ids))
  h = tf_keras.layers.Dense(6, name="hidden_1")(h)
  h = tf_keras.layers.Dense(4, name="hidden_2")(h)
  model = tf_keras.Model({"ids": ids}, tf_keras.layers.Dense(1, name="head")(h))
  infos = S.describe_variables(model)
  assert [(i.path, i.shape, i.kind) for i in infos] == [
      ("emb/embeddings", (10, 4), S.EMBEDDING),
      ("hidden_1/kernel", (4, 6), S.DENSE_KERNEL), ("hidden_1/bias", (6,), S.DENSE_BIAS),
      ("hidden_2/kernel", (6, 4), S.DENSE_KERNEL), ("hidden_2/bias", (4,), S.DENSE_BIAS),
      ("head/kernel", (4, 1), S.DENSE_KERNEL), ("head/bias", (1,), S.DENSE_BIAS)]
  assert S.default_rules(model, 2) == {"emb/embeddings": (None, "model"),
                                       "hidden_1/kernel": (None, "model"),
                                       "hidden_1/bias": ("model",),
                                       "hidden_2/kernel": ("model", None),
                                       "head/kernel": ("model", None)}


def test_user_rules_are_searched_in_the_path_as_keras_layout_map():
  """re.search, as Keras's LayoutMap: a rule found anywhere in a path applies to it."""
  rules = {r"hidden_1/kernel$": (None, "model"), r"_2/k": ("model", None)}
  placed = S.resolve(rules, PARITY, 2, "my_model.py")
  assert placed["hidden_1/kernel"] == (None, "model")
  assert placed["hidden_2/kernel"] == ("model", None)
  assert placed["emb/embeddings"] == (None, None)


def test_a_rule_equal_to_the_path_wins_over_a_pattern_as_in_keras():
  rules = {r"hidden_.*/kernel": (None, "model"), r"hidden_2/kernel": ("model", None)}
  placed = S.resolve(rules, PARITY, 2, "my_model.py")
  assert placed["hidden_1/kernel"] == (None, "model")
  assert placed["hidden_2/kernel"] == ("model", None)


def test_default_rule_is_anchored_when_its_path_is_inside_another_path():
  inner, outer = _dense("dense", 4, 8)[0], _dense("my_dense", 8, 4)[0]
  rules = S.default_rules_for([inner, outer], 2)
  assert rules == {"^dense/kernel$": (None, "model"), "my_dense/kernel": ("model", None)}
  assert S.resolve(rules, [inner, outer], 2) == {"dense/kernel": (None, "model"),
                                                 "my_dense/kernel": ("model", None)}


def _error(rules, variables=PARITY, axis=2) -> S.ShardingError:
  with pytest.raises(S.ShardingError) as info:
    S.validate_rules(rules, variables, axis, "my_model.py")
  return info.value


def test_rule_matching_no_variable_is_rejected():
  e = _error({r".*hiden_1/kernel": (None, "model")})
  assert (e.module, e.rule, e.variable) == ("my_model.py", r".*hiden_1/kernel", None)
  assert "matches no variable" in str(e) and "'my_model.py'" in str(e)
  assert "hidden_1/kernel" in str(e)  # Lists the variables there are.
  # Searched, not matched whole: "hidden_1" is found in hidden_1/kernel (rank 2).
  assert "rank 1" in str(_error({r"hidden_1": ("model",)}))


def test_rule_on_a_dimension_the_model_axis_does_not_divide_is_rejected():
  e = _error({r"head/kernel": (None, "model")})
  assert (e.module, e.rule, e.variable) == ("my_model.py", "head/kernel", "head/kernel")
  assert "size 3" in str(e) and "does not divide" in str(e)
  assert "Received: (None, 'model')" in str(e)


def test_rule_with_the_wrong_rank_is_rejected():
  e = _error({r".*/bias": (None, "model")})
  assert (e.rule, e.variable) == (r".*/bias", "hidden_1/bias")
  assert "rank 2" in str(e) and "rank 1" in str(e) and "'my_model.py'" in str(e)


def test_embedding_split_on_rows_is_rejected_naming_dtensor_limit():
  e = _error({r"emb/embeddings": ("model", None)}, axis=1)
  assert e.variable == "emb/embeddings"
  assert "ResourceGatherOp" in str(e) and "(None, 'model')" in str(e)


@pytest.mark.parametrize("sharding,fragment", [
    (("batch", None), "must be None or 'model'"),
    (("model", "model"), "at most one dimension"),
    ("model", "a tuple with one entry per dimension"),
])
def test_malformed_sharding_is_rejected(sharding, fragment):
  e = _error({r"hidden_2/kernel": sharding})
  assert fragment in str(e) and e.rule == "hidden_2/kernel"


def test_two_rules_matching_one_variable_are_rejected_naming_both():
  e = _error({r"hidden_.*/kernel": (None, "model"), r".*_2/kernel": ("model", None)})
  assert (e.rule, e.variable) == ("hidden_.*/kernel", "hidden_2/kernel")
  assert "'hidden_.*/kernel'" in str(e) and "'.*_2/kernel'" in str(e)
  assert "both match" in str(e)


def test_rule_whose_every_variable_has_an_exact_rule_is_rejected():
  e = _error({r"hidden_2/k": (None, "model"), r"hidden_2/kernel": ("model", None)})
  assert e.rule == "hidden_2/k" and e.variable == "hidden_2/kernel"
  assert "exactly its path" in str(e)


def test_invalid_regex_is_rejected():
  e = _error({r"hidden_(1/kernel": ("model", None)})
  assert "not a valid regex" in str(e) and e.rule == r"hidden_(1/kernel"
