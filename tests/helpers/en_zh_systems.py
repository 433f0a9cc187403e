"""Made-up en->zh news sentences with their references, a close system's translations and a weak one's: two
systems whose difference a paired test must find (tests/evaluate: significance and the baseline comparison)."""
from __future__ import annotations

EN = ["The museum reopened on Monday after two years of renovation.",
      "Heavy rain is expected in the south of the country this weekend.",
      "The company said its profits rose by 12 percent last year.",
      "Visitors should book their tickets at least a week in advance.",
      "Scientists have found water ice near the moon's south pole.",
      "The new subway line will open at the end of next year.",
      "The writer's new novel has been translated into twenty languages.",
      "The city plans to build a park by the river."]
REFS = ["这座博物馆经过两年的翻修，于周一重新开放。", "预计本周末该国南部将有大雨。", "该公司表示，其去年的利润增长了百分之十二。",
        "游客应至少提前一周预订门票。", "科学家在月球南极附近发现了水冰。", "新的地铁线路将于明年年底通车。",
        "这位作家的新小说已被翻译成二十种语言。", "市政府计划在河边修建一座公园。"]
GOOD = ["这座博物馆翻修两年后于周一重新开放。", "预计本周末该国南部将有大雨。", "该公司说，去年利润增长了百分之十二。",
        "游客应至少提前一周订票。", "科学家在月球南极附近发现了水冰。", "新地铁线路将在明年年底开通。",
        "这位作家的新小说已被译成二十种语言。", "市政府计划在河边建一座公园。"]
WEAK = ["博物馆开了。", "南方下雨。", "公司利润很多。", "游客买票。", "科学家找到冰。", "地铁明年。", "小说翻译了。", "政府要公园。"]
