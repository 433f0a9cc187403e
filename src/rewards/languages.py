"""Languages and scripts: the one table of what the reward's checks know about a target language
(its script's letters, its script family, whether it writes without spaces), the Unicode letter
ranges of each script, the base code of a language tag, and ISO 639 codes (1 <-> 3) for language IDs.

A leaf: stdlib only, imported by the degenerate checks, the guards, BLEU and language-ID loading,
so a language added here reaches all of them.
"""
from __future__ import annotations

from dataclasses import dataclass

# the letters of each script, as regex character-class ranges
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
KANA = "\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f"
HANGUL = "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
LATIN = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff"
CYRILLIC = "\u0400-\u04ff"


@dataclass(frozen=True)
class Script:
    # the letters that count as the language's script (degenerate.py: the wrong-script check)
    letters: str
    # its script family: tokens of another family are "the other script" (guards.py: code_mix, length)
    family: str
    # written without spaces: lengths in characters, n-grams of characters (guards.py)
    unspaced: bool = False


_LATIN_SCRIPT = Script(LATIN, "latin")
# target language (base code) -> its script
SCRIPTS = {
    "zh": Script(HAN, "cjk", unspaced=True),
    "ja": Script(HAN + KANA, "cjk", unspaced=True),
    "ko": Script(HANGUL + HAN, "cjk"),
    "ru": Script(CYRILLIC, "cyrillic"),
    "uk": Script(CYRILLIC, "cyrillic"),
    **{lang: _LATIN_SCRIPT for lang in ("en", "de", "fr", "es", "it", "pt", "nl", "cs", "pl", "ro")},
}


def base_lang(code: str | None) -> str:
    """'zh' for zh-CN, zh_Hans or ZH."""
    return (code or "").split("-")[0].split("_")[0].lower()


def family(lang: str) -> str | None:
    """The script family of a base code ('cjk', 'latin', 'cyrillic'); None for a language not in SCRIPTS."""
    script = SCRIPTS.get(lang)
    return script.family if script else None


def unspaced(lang: str) -> bool:
    """zh and ja: no spaces between words."""
    script = SCRIPTS.get(lang)
    return bool(script and script.unspaced)


# ISO 639-1 code -> ISO 639-3 (the 639-2/T code, as OpenLID-v2 and GlotLID labels name languages)
ISO_639_1 = dict(pair.split(":") for pair in """
    aa:aar ab:abk ae:ave af:afr ak:aka am:amh an:arg ar:ara as:asm av:ava ay:aym az:aze ba:bak be:bel
    bg:bul bi:bis bm:bam bn:ben bo:bod br:bre bs:bos ca:cat ce:che ch:cha co:cos cr:cre cs:ces cu:chu
    cv:chv cy:cym da:dan de:deu dv:div dz:dzo ee:ewe el:ell en:eng eo:epo es:spa et:est eu:eus fa:fas
    ff:ful fi:fin fj:fij fo:fao fr:fra fy:fry ga:gle gd:gla gl:glg gn:grn gu:guj gv:glv ha:hau he:heb
    hi:hin ho:hmo hr:hrv ht:hat hu:hun hy:hye hz:her ia:ina id:ind ie:ile ig:ibo ii:iii ik:ipk io:ido
    is:isl it:ita iu:iku ja:jpn jv:jav ka:kat kg:kon ki:kik kj:kua kk:kaz kl:kal km:khm kn:kan ko:kor
    kr:kau ks:kas ku:kur kv:kom kw:cor ky:kir la:lat lb:ltz lg:lug li:lim ln:lin lo:lao lt:lit lu:lub
    lv:lav mg:mlg mh:mah mi:mri mk:mkd ml:mal mn:mon mr:mar ms:msa mt:mlt my:mya na:nau nb:nob nd:nde
    ne:nep ng:ndo nl:nld nn:nno no:nor nr:nbl nv:nav ny:nya oc:oci oj:oji om:orm or:ori os:oss pa:pan
    pi:pli pl:pol ps:pus pt:por qu:que rm:roh rn:run ro:ron ru:rus rw:kin sa:san sc:srd sd:snd se:sme
    sg:sag si:sin sk:slk sl:slv sm:smo sn:sna so:som sq:sqi sr:srp ss:ssw st:sot su:sun sv:swe sw:swa
    ta:tam te:tel tg:tgk th:tha ti:tir tk:tuk tl:tgl tn:tsn to:ton tr:tur ts:tso tt:tat tw:twi ty:tah
    ug:uig uk:ukr ur:urd uz:uzb ve:ven vi:vie vo:vol wa:wln wo:wol xh:xho yi:yid yo:yor za:zha zh:zho
    zu:zul""".split())
# the individual languages OpenLID-v2 / GlotLID label where ISO 639-1 names their macrolanguage
# (Mandarin is zh, Standard Arabic ar, Iranian Persian fa, ...)
MACRO_MEMBERS = {"cmn": "zh", "arb": "ar", "pes": "fa", "prs": "fa", "zsm": "ms", "ekk": "et", "lvs": "lv",
                 "npi": "ne", "khk": "mn", "uzn": "uz", "swh": "sw", "ydd": "yi", "azj": "az", "azb": "az",
                 "als": "sq", "plt": "mg", "gaz": "om", "quy": "qu", "ory": "or", "pbt": "ps", "kmr": "ku",
                 "ckb": "ku"}
# ISO 639-3 -> the project's code (ISO 639-1 where there is one)
ISO_639_3 = {three: two for two, three in ISO_639_1.items()} | MACRO_MEMBERS
