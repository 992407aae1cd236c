"""New stories for the three-operation training shapes of word_problems (see word_problems.py): four per shape."""

from rapo_trl.tasks.story_template import N3, N4, N5, N6, StoryTemplate

STORIES = [
    # --- wp13: price * (a + b) - deduction ---
    StoryTemplate(
        "wp13_s1",
        "A locksmith charges {rate} pence for every key it cuts. For a landlord's block of flats it cut "
        "{front_door} front-door keys and {mailbox} mailbox keys, then took {discount} pence off the whole "
        "bill as a bulk discount. How many pence does the landlord pay?",
        {"rate": (350, 999), "front_door": N4, "mailbox": N4, "discount": N5},
        "rate * (front_door + mailbox) - discount",
        shape_of_template="wp13",
    ),
    StoryTemplate(
        "wp13_s2",
        "How many pence does a museum's audio-guide desk keep from its rentals after paying a repair bill "
        "of {repairs} pence for broken headsets, if it rented out {weekday} guides on weekdays and "
        "{weekend} at weekends, charging {fee} pence per guide?",
        {"repairs": N5, "weekday": N4, "weekend": N4, "fee": (350, 999)},
        "fee * (weekday + weekend) - repairs",
        shape_of_template="wp13",
    ),
    StoryTemplate(
        "wp13_s3",
        "{name} runs a car wash that charges {charge} pence per wash. Last month it washed {cars} cars and "
        "{vans} vans, and {name} paid a customer {damages} pence in compensation for a broken wing mirror. "
        "How many pence did the car wash earn last month once the compensation is paid?",
        {"charge": (350, 999), "cars": N4, "vans": N4, "damages": N5},
        "charge * (cars + vans) - damages",
        shape_of_template="wp13",
    ),
    StoryTemplate(
        "wp13_s4",
        "A translation agency paid {licence} pence for a software licence this month. It translated "
        "{contract} pages of legal contracts and {manual} pages of user manuals, earning {per_page} pence "
        "for each page. What is left of its earnings, in pence, once the licence is paid for?",
        {"licence": N5, "contract": N4, "manual": N4, "per_page": (350, 999)},
        "per_page * (contract + manual) - licence",
        shape_of_template="wp13",
    ),
    # --- wp14: a * b + c * d ---
    StoryTemplate(
        "wp14_s1",
        "{name}'s stained-glass studio made {small_windows} small windows with {small_panes} panes each and "
        "{large_windows} large windows with {large_panes} panes each. How many panes of glass did the "
        "studio set?",
        {"small_windows": N3, "small_panes": (12, 48), "large_windows": N3, "large_panes": (12, 48)},
        "small_windows * small_panes + large_windows * large_panes",
        shape_of_template="wp14",
    ),
    StoryTemplate(
        "wp14_s2",
        "How many rivets hold the hull plates of a new ship, if each of its {deck_plates} deck plates is "
        "fixed with {deck_rivets} rivets and each of its {side_plates} side plates with {side_rivets} "
        "rivets?",
        {"deck_plates": N3, "deck_rivets": (12, 48), "side_plates": N3, "side_rivets": (12, 48)},
        "deck_plates * deck_rivets + side_plates * side_rivets",
        shape_of_template="wp14",
    ),
    StoryTemplate(
        "wp14_s3",
        "A theatre's costume department sews buttons on for a new production. Each ball gown gets "
        "{gown_buttons} buttons and there are {gowns} gowns; each coat gets {coat_buttons} buttons and "
        "there are {coats} coats. How many buttons are sewn on?",
        {"gown_buttons": (12, 48), "gowns": N3, "coat_buttons": (12, 48), "coats": N3},
        "gowns * gown_buttons + coat_buttons * coats",
        shape_of_template="wp14",
    ),
    StoryTemplate(
        "wp14_s4",
        "There are {open_spaces} parking spaces in each of a city operator's {open_lots} open-air car parks "
        "and {garage_spaces} spaces in each of its {garages} multi-storey garages. Count all the parking "
        "spaces the operator runs.",
        {"open_spaces": (12, 48), "open_lots": N3, "garage_spaces": (12, 48), "garages": N3},
        "open_spaces * open_lots + garage_spaces * garages",
        shape_of_template="wp14",
    ),
    # --- wp15: (a - b) * c // d ---
    StoryTemplate(
        "wp15_s1",
        "A sawmill received {logs} logs, but {rotten} of them were rotten and were burned. Each sound log "
        "is sawn into {planks} planks, and planks are sold only in complete bundles of {bundle}. How many "
        "complete bundles can the sawmill sell?",
        {"logs": (50_000, 99_999), "rotten": N4, "planks": (12, 40), "bundle": N3},
        "(logs - rotten) * planks // bundle",
        shape_of_template="wp15",
    ),
    StoryTemplate(
        "wp15_s2",
        "How many full spools of silk thread can {name}'s silk farm wind this season? It gathered {cocoons} "
        "cocoons and threw away {damaged} damaged ones, every good cocoon gives {metres} metres of thread, "
        "and a spool is full when it holds {spool} metres.",
        {"cocoons": (50_000, 99_999), "damaged": N4, "metres": (12, 40), "spool": N3},
        "(cocoons - damaged) * metres // spool",
        shape_of_template="wp15",
    ),
    StoryTemplate(
        "wp15_s3",
        "On a mushroom farm every healthy bag of compost grows {crop} mushrooms. The farm filled {bags} "
        "bags, of which {mouldy} went mouldy and grew nothing. Mushrooms leave the farm in catering packs "
        "of {pack}, and a pack is sent only when it is full. How many packs are sent?",
        {"crop": (12, 40), "bags": (50_000, 99_999), "mouldy": N4, "pack": N3},
        "crop * (bags - mouldy) // pack",
        shape_of_template="wp15",
    ),
    StoryTemplate(
        "wp15_s4",
        "Soap is sold in shrink-wrapped packs of {per_pack} bars. A soap maker had {soap_base} kilograms of "
        "soap base and spilled {spilt} kilograms of it; from every remaining kilogram it cuts {bars} bars. "
        "How many complete packs can it make?",
        {"per_pack": N3, "soap_base": (50_000, 99_999), "spilt": N4, "bars": (12, 40)},
        "(soap_base - spilt) * bars // per_pack",
        shape_of_template="wp15",
    ),
    # --- wp16: (a + b + c) // d, shared exactly ---
    StoryTemplate(
        "wp16_s1",
        "On three coach trips the tour guides collected {tips_a}, {tips_b} and {tips_c} pence in tips, and "
        "all of it is shared equally among the company's {guides} guides. How many pence does each guide "
        "receive?",
        {"tips_a": N5, "tips_b": N5, "tips_c": N5, "guides": (12, 40)},
        "(tips_a + tips_b + tips_c) // guides",
        exact=(("tips_c", "(tips_a + tips_b + tips_c) % guides"),),
        shape_of_template="wp16",
    ),
    StoryTemplate(
        "wp16_s2",
        "A perfumer blends three batches of scent measuring {batch_a}, {batch_b} and {batch_c} millilitres "
        "and pours all of it equally into {flacons} flacons, with nothing left over. How many millilitres "
        "of scent go into each flacon?",
        {"batch_a": N5, "batch_b": N5, "batch_c": N5, "flacons": (12, 40)},
        "(batch_a + batch_b + batch_c) // flacons",
        exact=(("batch_c", "(batch_a + batch_b + batch_c) % flacons"),),
        shape_of_template="wp16",
    ),
    StoryTemplate(
        "wp16_s3",
        "A documentary is cut into {episodes} episodes of exactly equal length that together use all the "
        "footage its film crew shot: {day_one} seconds on the first day, {day_two} on the second and "
        "{day_three} on the third. How many seconds long is each episode?",
        {"episodes": (12, 40), "day_one": N5, "day_two": N5, "day_three": N5},
        "(day_one + day_two + day_three) // episodes",
        exact=(("day_three", "(day_one + day_two + day_three) % episodes"),),
        shape_of_template="wp16",
    ),
    StoryTemplate(
        "wp16_s4",
        "How many millilitres of plasma go into each bag, if a blood bank divides the {morning}, "
        "{afternoon} and {evening} millilitres it collected at three donation sessions equally among {bags} "
        "bags?",
        {"morning": N5, "afternoon": N5, "evening": N5, "bags": (12, 40)},
        "(morning + afternoon + evening) // bags",
        exact=(("evening", "(morning + afternoon + evening) % bags"),),
        shape_of_template="wp16",
    ),
    # --- wp17: a - n * per + delivery ---
    StoryTemplate(
        "wp17_s1",
        "At dawn the snowmaking reservoir of a ski resort holds {reservoir} litres. During the morning each "
        "of its {cannons} snow cannons draws {draw} litres from it, and in the afternoon a mountain stream "
        "adds {inflow} litres. How many litres does the reservoir hold at nightfall?",
        {"reservoir": (500_000, 999_999), "cannons": (12, 80), "draw": (100, 400), "inflow": N5},
        "reservoir - cannons * draw + inflow",
        shape_of_template="wp17",
    ),
    StoryTemplate(
        "wp17_s2",
        "Before a cold snap, a council's salt barn held {salt} kilograms of road salt. During the snap "
        "{gritters} gritters each loaded {load} kilograms from the barn, and afterwards a supplier "
        "delivered {restock} kilograms. Find the weight of salt in the barn now, in kilograms.",
        {"salt": (500_000, 999_999), "gritters": (12, 80), "load": (100, 400), "restock": N5},
        "salt - gritters * load + restock",
        shape_of_template="wp17",
    ),
    StoryTemplate(
        "wp17_s3",
        "How many ride tokens does a fairground have at the end of the week? It started the week with "
        "{stock} tokens, received a shipment of {shipment} tokens on Friday, and earlier in the week handed "
        "out {per_stall} tokens to each of its {stalls} stalls.",
        {"stock": (500_000, 999_999), "shipment": N5, "per_stall": (100, 400), "stalls": (12, 80)},
        "stock - stalls * per_stall + shipment",
        shape_of_template="wp17",
    ),
    StoryTemplate(
        "wp17_s4",
        "A circus kept {kernels} grams of popcorn kernels in store on Monday. A supplier brought another "
        "{order} grams during the week, and each of the week's {shows} shows used {per_show} grams. How "
        "many grams of kernels are left after the week?",
        {"kernels": (500_000, 999_999), "order": N5, "shows": (12, 80), "per_show": (100, 400)},
        "kernels - shows * per_show + order",
        shape_of_template="wp17",
    ),
    # --- wp18: (a * b - c) // d ---
    StoryTemplate(
        "wp18_s1",
        "A ropewalk made {coils} coils of rope, each {coil_length} metres long. After {tested} metres are "
        "cut off for strength tests, the rest is cut into mooring lines of {line} metres. How many complete "
        "mooring lines are there?",
        {"coils": N3, "coil_length": (50, 99), "tested": N3, "line": (12, 30)},
        "(coils * coil_length - tested) // line",
        shape_of_template="wp18",
    ),
    StoryTemplate(
        "wp18_s2",
        "{name}'s knitting club gave {gift} metres of yarn to a school from its stash of {skeins} skeins of "
        "{skein_length} metres each. Every scarf the club knits needs {per_scarf} metres. How many complete "
        "scarves can it knit from the yarn that is left?",
        {"gift": N3, "skeins": N3, "skein_length": (50, 99), "per_scarf": (12, 30)},
        "(skeins * skein_length - gift) // per_scarf",
        shape_of_template="wp18",
    ),
    StoryTemplate(
        "wp18_s3",
        "How many complete lengths of {length} metres for its engines can a fire station cut from {reels} "
        "reels of hose holding {reel_length} metres each, once {worn} worn metres have been cut away and "
        "thrown out?",
        {"length": (12, 30), "reels": N3, "reel_length": (50, 99), "worn": N3},
        "(reel_length * reels - worn) // length",
        shape_of_template="wp18",
    ),
    StoryTemplate(
        "wp18_s4",
        "A carpet fitter has {carpet_rolls} rolls of carpet with {roll_length} metres on each roll. She "
        "lays {hallway} metres in a hotel hallway and cuts the rest into stair runners of {runner} metres. "
        "How many complete stair runners can she cut?",
        {"carpet_rolls": N3, "roll_length": (50, 99), "hallway": N3, "runner": (12, 30)},
        "(carpet_rolls * roll_length - hallway) // runner",
        shape_of_template="wp18",
    ),
    # --- wp19: a * b // c + d ---
    StoryTemplate(
        "wp19_s1",
        "A weather station records {readings} readings a day for {log_days} days and packs them into data "
        "files of {per_file} readings, uploading only complete files. {uploaded} files had been uploaded "
        "before those days began. How many files have been uploaded altogether at the end?",
        {"readings": N4, "log_days": (20, 31), "per_file": N3, "uploaded": N4},
        "readings * log_days // per_file + uploaded",
        shape_of_template="wp19",
    ),
    StoryTemplate(
        "wp19_s2",
        "A seed company's warehouse already holds {stored} packets of seed. For {fill_days} days its "
        "machine counts out {seeds} seeds a day into packets of {packet} seeds, and only full packets go to "
        "the warehouse. How many packets are in the warehouse afterwards?",
        {"stored": N4, "fill_days": (20, 31), "seeds": N4, "packet": N3},
        "seeds * fill_days // packet + stored",
        shape_of_template="wp19",
    ),
    StoryTemplate(
        "wp19_s3",
        "How many bales of socks will a sock factory's warehouse hold after {shifts} shifts, if it starts "
        "with {bales} bales, the factory knits {socks} socks a shift, and the socks are pressed into bales "
        "of {per_bale}, counting only full bales?",
        {"shifts": (20, 31), "bales": N4, "socks": N4, "per_bale": N3},
        "bales + socks * shifts // per_bale",
        shape_of_template="wp19",
    ),
    StoryTemplate(
        "wp19_s4",
        "A spice merchant grinds {grams} grams of pepper each day. After {grinding_days} days of grinding, "
        "the pepper is packed into sachets of {sachet} grams, only complete sachets are kept, and they join "
        "the {old_sachets} sachets already on the shelves. How many sachets are on the shelves then?",
        {"grams": N4, "grinding_days": (20, 31), "sachet": N3, "old_sachets": N4},
        "grams * grinding_days // sachet + old_sachets",
        shape_of_template="wp19",
    ),
    # --- wp21: a * b - c - d ---
    StoryTemplate(
        "wp21_s1",
        "On its tour a band played {shows} shows, each in a hall with {places} places. {unsold} places went "
        "unsold, and {guests} more were given free to guest-list guests. How many places were sold?",
        {"shows": (100, 400), "places": (150, 400), "unsold": N4, "guests": N3},
        "shows * places - unsold - guests",
        shape_of_template="wp21",
    ),
    StoryTemplate(
        "wp21_s2",
        "How many driving tests were taken at a test centre that offered {slots} test slots on each of "
        "{days} working days, if {unbooked} slots were never booked and {cancelled} booked tests were "
        "cancelled?",
        {"slots": (150, 400), "days": (100, 400), "unbooked": N4, "cancelled": N3},
        "days * slots - unbooked - cancelled",
        shape_of_template="wp21",
    ),
    StoryTemplate(
        "wp21_s3",
        "A pottery fired its kiln {firings} times with {per_firing} pots in each firing. {cracked} pots "
        "cracked in the heat and {flawed} others had glaze flaws; all of those were thrown out. How many "
        "pots did the pottery keep?",
        {"firings": (100, 400), "per_firing": (150, 400), "cracked": N4, "flawed": N3},
        "firings * per_firing - cracked - flawed",
        shape_of_template="wp21",
    ),
    StoryTemplate(
        "wp21_s4",
        "{name}'s sticker factory printed {sheets} sheets with {per_sheet} stickers on each. Of those "
        "stickers, {smudged} were smudged and {samples} were posted to shops as free samples. Work out how "
        "many stickers are left to sell.",
        {"sheets": (100, 400), "per_sheet": (150, 400), "smudged": N4, "samples": N3},
        "sheets * per_sheet - smudged - samples",
        shape_of_template="wp21",
    ),
    # --- wp22: (a + b) // c - d ---
    StoryTemplate(
        "wp22_s1",
        "Two maple groves gave {grove_a} and {grove_b} litres of sap this spring. Boiling down {ratio} "
        "litres of sap makes one litre of syrup, and only complete litres of syrup are counted. {name} "
        "gives {gifted} litres of the syrup to neighbours. How many litres of syrup are left to sell?",
        {"grove_a": N5, "grove_b": N5, "ratio": (12, 25), "gifted": (10, 500)},
        "(grove_a + grove_b) // ratio - gifted",
        shape_of_template="wp22",
    ),
    StoryTemplate(
        "wp22_s2",
        "Canal barges carry {barge} tonnes of freight each and sail only when full. This month the northern "
        "docks sent {north} tonnes of freight and the southern docks {south} tonnes, but customs held back "
        "{held} of the full barges. How many full barges sailed?",
        {"barge": (12, 25), "north": N5, "south": N5, "held": (10, 500)},
        "(north + south) // barge - held",
        shape_of_template="wp22",
    ),
    StoryTemplate(
        "wp22_s3",
        "How many bales of wool go to auction, if two sheep farms sheared {wool_a} and {wool_b} kilograms "
        "of wool, the wool is pressed into bales of {bale} kilograms (only full bales are made), and {damp} "
        "full bales were ruined by damp?",
        {"wool_a": N5, "wool_b": N5, "bale": (12, 25), "damp": (10, 500)},
        "(wool_a + wool_b) // bale - damp",
        shape_of_template="wp22",
    ),
    StoryTemplate(
        "wp22_s4",
        "At an olive mill {dented} full cans of oil were dented and rejected today. The mill's two presses "
        "produced {press_a} and {press_b} litres of oil. The oil is poured into {can}-litre cans, and oil "
        "that cannot fill a whole can is used in the mill's kitchen. How many full cans are sold?",
        {"dented": (10, 500), "press_a": N5, "press_b": N5, "can": (12, 25)},
        "(press_b + press_a) // can - dented",
        shape_of_template="wp22",
    ),
    # --- wp24: (a + b) * (c - d) ---
    StoryTemplate(
        "wp24_s1",
        "A gym signed up {jan} new members in January and {feb} in February. Membership costs {fee} pence, "
        "but every new member got {promo} pence off through a promotion. How many pence did the new members "
        "pay in total?",
        {"jan": N3, "feb": N3, "fee": (150, 999), "promo": (10, 99)},
        "(jan + feb) * (fee - promo)",
        shape_of_template="wp24",
    ),
    StoryTemplate(
        "wp24_s2",
        "How many pence did a railway take on one route if it sold {monday} tickets on Monday and {tuesday} "
        "on Tuesday, each at a fare of {fare} pence less a railcard discount of {railcard} pence?",
        {"monday": N3, "tuesday": N3, "fare": (150, 999), "railcard": (10, 99)},
        "(monday + tuesday) * (fare - railcard)",
        shape_of_template="wp24",
    ),
    StoryTemplate(
        "wp24_s3",
        "A florist buys each rose for {cost} pence and sells it for {sale} pence. This week she sold {red} "
        "red roses and {white} white ones. What profit, in pence, did she make on those roses?",
        {"cost": (10, 99), "sale": (150, 999), "red": N3, "white": N3},
        "(sale - cost) * (red + white)",
        shape_of_template="wp24",
    ),
    StoryTemplate(
        "wp24_s4",
        "Each gift hamper weighs {gross} grams, of which {basket} grams is the wicker basket and the rest "
        "is food. A shop packed {christmas} Christmas hampers and {easter} Easter hampers. What weight of "
        "food, in grams, is in all of them together?",
        {"gross": (150, 999), "basket": (10, 99), "christmas": N3, "easter": N3},
        "(christmas + easter) * (gross - basket)",
        shape_of_template="wp24",
    ),
    # --- wp25: a // b + c // d ---
    StoryTemplate(
        "wp25_s1",
        "A golf driving range puts white balls into buckets of {per_bucket} and yellow practice balls into "
        "baskets of {per_basket}; only full buckets and baskets go out to the tees. This week it collected "
        "{white} white balls and {yellow} yellow ones. How many buckets and baskets did it fill in total?",
        {"per_bucket": N3, "per_basket": N3, "white": N6, "yellow": N6},
        "white // per_bucket + yellow // per_basket",
        shape_of_template="wp25",
    ),
    StoryTemplate(
        "wp25_s2",
        "A laboratory supplier has {tubes} test tubes and {slides} microscope slides in stock. Test tubes "
        "ship in racks of {rack} and slides in trays of {tray}, and only full racks and full trays are "
        "shipped. How many racks and trays can it ship in all?",
        {"tubes": N6, "slides": N6, "rack": N3, "tray": N3},
        "slides // tray + tubes // rack",
        shape_of_template="wp25",
    ),
    StoryTemplate(
        "wp25_s3",
        "{name}'s cutlery factory packs {spoons} spoons into canteens of {per_canteen} spoons and {knives} "
        "knives into rolls of {per_roll} knives. Counting only complete canteens and rolls, how many "
        "canteens and rolls are there altogether?",
        {"spoons": N6, "per_canteen": N3, "knives": N6, "per_roll": N3},
        "spoons // per_canteen + knives // per_roll",
        shape_of_template="wp25",
    ),
    StoryTemplate(
        "wp25_s4",
        "How many full tubs and full bunches can a sweet shop make from {gummies} gummy sweets and "
        "{lollies} lollipops, if a tub holds {tub} gummy sweets and a bunch has {bunch} lollipops?",
        {"gummies": N6, "lollies": N6, "tub": N3, "bunch": N3},
        "gummies // tub + lollies // bunch",
        shape_of_template="wp25",
    ),
]
