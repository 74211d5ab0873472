"""Fixed, multilingual name lists for the demo AddressBook (no real people behind them)."""

from __future__ import annotations

FIRST = {
    "en": ["Alex", "Jordan", "Taylor", "Morgan", "Casey", "Riley", "Jamie", "Avery", "Quinn",
           "Emily", "Michael", "Sarah", "David", "Olivia", "James", "Grace", "Daniel", "Hannah"],
    "es": ["Lucía", "Mateo", "Sofía", "Diego", "Valentina", "Javier", "Camila", "Andrés"],
    "tr": ["Ayşe", "Mehmet", "Zeynep", "Emre", "Elif", "Burak", "Şule", "Çağrı", "Gökhan", "İpek"],
    "ar": ["محمد", "فاطمة", "أحمد", "ليلى", "Omar", "Yasmin", "Khalid", "Noor"],
    "de": ["Jürgen", "Anna", "Lukas", "Mia", "Felix", "Lena"],
    "fr": ["Chloé", "Louis", "Amélie", "Théo", "Léa", "Hugo"],
    "ja": ["陽菜", "蓮", "Yuki", "Haruto", "Sakura"],
}

LAST = {
    "en": ["Smith", "Johnson", "Lee", "Brown", "Garcia", "Miller", "Davis", "Wilson", "Clark",
           "Nguyen", "Patel", "O'Brien", "Walker", "Young", "King"],
    "es": ["Fernández", "López", "Martínez", "Gómez", "Rodríguez", "Núñez"],
    "tr": ["Yılmaz", "Kaya", "Demir", "Şahin", "Çelik", "Öztürk", "Aydın", "Doğan"],
    "ar": ["العلي", "حسن", "Al-Mansouri", "Haddad", "Nasser", "Al-Farsi"],
    "de": ["Müller", "Schmidt", "Weiß", "Schröder", "Becker"],
    "fr": ["Dubois", "Lefèvre", "Moreau", "Girard", "Faure"],
    "ja": ["佐藤", "鈴木", "Tanaka", "Watanabe", "Yamamoto"],
}

NICKNAMES = ["Bubba", "Doc", "Sis", "Coach", "Mamá", "Abi", "Habibi", "Boss"]

ORGANIZATIONS = ["Acme Dental", "Sunrise Yoga Studio", "Blue Bottle Plumbing", "Kadıköy Kuaför",
                 "Dubai Marina Rentals", "City Library"]

# Locale of names for a phone country calling code (anything else: US mix).
LOCALE_BY_CC = {"90": "tr", "971": "ar", "49": "de", "33": "fr", "81": "ja", "44": "en", "34": "es"}
US_LOCALES = ["en", "en", "en", "en", "es", "tr", "ar", "fr", "de", "ja"]
