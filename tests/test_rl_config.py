"""RLConfig: defaults, validation errors naming key and value, omegaconf use, hand-offs."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from populora.rl.config import RLConfig
from populora.rl.losses import policy_loss


def test_defaults():
    cfg = RLConfig()
    assert cfg.estimator_for("teacher") == "trr++"
    assert cfg.estimator_for("student") == "rpp_baseline"
    assert cfg.lr == 5e-5 and cfg.max_grad_norm == 1.0 and cfg.kl_coef == 0.0 and cfg.entropy_coef == 0.0
    with pytest.raises(ValueError, match="rl.role must be one of"):
        cfg.estimator_for("judge")


@pytest.mark.parametrize(
    "key, value",
    [
        ("teacher_estimator", "ppo"),
        ("student_estimator", "trr"),
        ("aggregation", "mean"),
        ("kl_estimator", "k4"),
        ("clip_eps", 0.0),
        ("clip_eps", 1.0),
        ("clip_eps", "0.2"),
        ("kl_coef", -0.1),
        ("entropy_coef", float("nan")),
        ("weight_decay", -1e-4),
        ("max_grad_norm", 0.0),
        ("lr", 0.0),
        ("lr", 1.5),
        ("lr", True),
        ("adam_eps", 0.0),
        ("betas", (0.9,)),
        ("betas", (0.9, 1.0)),
        ("betas", "0.9,0.99"),
    ],
)
def test_invalid_values_name_key_and_value(key, value):
    with pytest.raises(ValueError, match=rf"rl\.{key} .*{value!r}".replace("(", r"\(").replace(")", r"\)")):
        RLConfig(**{key: value})


def test_nullable_fields_and_list_betas():
    cfg = RLConfig(clip_eps=None, max_grad_norm=None, betas=[0.8, 0.95])
    assert cfg.betas == (0.8, 0.95)


def test_from_dict_rejects_unknown_keys():
    assert RLConfig.from_dict({"lr": 1e-4}).lr == 1e-4
    with pytest.raises(ValueError, match="unknown key\\(s\\) rl.learning_rate"):
        RLConfig.from_dict({"learning_rate": 1e-4})


def test_omegaconf_structured_overrides_and_validation():
    base = OmegaConf.structured(RLConfig)
    merged = OmegaConf.merge(base, OmegaConf.from_dotlist(["lr=1e-4", "clip_eps=null", "betas=[0.9,0.95]"]))
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, RLConfig) and cfg.lr == 1e-4 and cfg.clip_eps is None and cfg.betas == (0.9, 0.95)
    bad = OmegaConf.merge(base, OmegaConf.from_dotlist(["aggregation=mean"]))
    with pytest.raises(ValueError, match="rl.aggregation"):
        OmegaConf.to_object(bad)


def test_hand_offs_to_loss_and_optimizer():
    cfg = RLConfig(clip_eps=0.1, aggregation="seq_mean", weight_decay=0.01)
    param = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.AdamW([param], **cfg.adamw_kwargs())
    assert opt.defaults["lr"] == 5e-5 and opt.defaults["weight_decay"] == 0.01
    lp = param[None, :] - 1.0
    loss, stats = policy_loss(
        lp, lp.detach(), torch.tensor([1.0]), torch.ones(1, 3, dtype=torch.bool), **cfg.loss_kwargs()
    )
    loss.backward()
    opt.step()
    assert (param > 0).all()  # positive advantage pushed the logprobs up
