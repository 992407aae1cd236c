"""New stories for the two-operation training shapes of word_problems (see word_problems.py): eleven per shape."""
from rapo_trl.tasks.story_template import N3, N4, N5, N6, StoryTemplate

STORIES = [
    # --- wp01: (crates_a + crates_b) * per_crate ---
    StoryTemplate(
        "wp01_s1",
        "A vineyard planted {rows_north} new rows of vines on its north slope and {rows_south} on its south "
        "slope, with {vines_per_row} vines in every row. How many vines were planted?",
        {"rows_north": N3, "rows_south": N3, "vines_per_row": (24, 96)},
        "(rows_north + rows_south) * vines_per_row",
        shape_of_template="wp01",
    ),
    StoryTemplate(
        "wp01_s2",
        "Every jigsaw in a toymaker's children's range has {pieces} pieces. How many pieces must the toymaker "
        "cut to make {animal_jigsaws} animal jigsaws and {train_jigsaws} train jigsaws?",
        {"pieces": (24, 96), "animal_jigsaws": N3, "train_jigsaws": N3},
        "pieces * (animal_jigsaws + train_jigsaws)",
        shape_of_template="wp01",
    ),
    StoryTemplate(
        "wp01_s3",
        "How many jars of honey does {name} take from the hives this summer? {name} keeps {hives_heath} hives "
        "on the heath and {hives_valley} in the valley, and every hive yields {jars_per_hive} jars.",
        {"hives_heath": N3, "hives_valley": N3, "jars_per_hive": (24, 96)},
        "(hives_heath + hives_valley) * jars_per_hive",
        shape_of_template="wp01",
    ),
    StoryTemplate(
        "wp01_s4",
        "A fireworks display launches {rockets_per_rack} rockets from every launch rack. It sets up "
        "{racks_barge} racks on a barge and {racks_shore} racks along the shore. Find the number of rockets "
        "launched.",
        {"rockets_per_rack": (24, 96), "racks_barge": N3, "racks_shore": N3},
        "rockets_per_rack * (racks_shore + racks_barge)",
        shape_of_template="wp01",
    ),
    StoryTemplate(
        "wp01_s5",
        "Park gardeners dig {tulip_beds} flower beds for tulips and {crocus_beds} for crocuses, then plant "
        "{bulbs_per_bed} bulbs in each bed. How many bulbs go into the ground altogether?",
        {"tulip_beds": N3, "crocus_beds": N3, "bulbs_per_bed": (24, 96)},
        "(tulip_beds + crocus_beds) * bulbs_per_bed",
        shape_of_template="wp01",
    ),
    StoryTemplate(
        "wp01_s6",
        "A bookbinder sews {pages_per_notebook} pages into every notebook. How many pages does she need for "
        "{lined_notebooks} lined notebooks and {plain_notebooks} plain ones?",
        {"pages_per_notebook": (24, 96), "lined_notebooks": N3, "plain_notebooks": N3},
        "pages_per_notebook * (lined_notebooks + plain_notebooks)",
        shape_of_template="wp01",
    ),
    StoryTemplate(
        "wp01_s7",
        "A laundry washes {towels_per_load} towels in every load. Over the month it ran {day_loads} loads on "
        "the day shift and {night_loads} loads on the night shift. How many towels did it wash that month?",
        {"towels_per_load": (24, 96), "day_loads": N3, "night_loads": N3},
        "(day_loads + night_loads) * towels_per_load",
        shape_of_template="wp01",
    ),
    StoryTemplate(
        "wp01_s8",
        "How many flats are there in a new housing development of {blocks_east} blocks east of the river and "
        "{blocks_west} blocks west of it, if every block contains {flats_per_block} flats?",
        {"blocks_east": N3, "blocks_west": N3, "flats_per_block": (24, 96)},
        "(blocks_west + blocks_east) * flats_per_block",
        shape_of_template="wp01",
    ),
    StoryTemplate(
        "wp01_s9",
        "A crayon factory fills {school_boxes} school boxes and {gift_boxes} gift boxes with {crayons_per_box} "
        "crayons in each box. How many crayons does it use?",
        {"school_boxes": N3, "gift_boxes": N3, "crayons_per_box": (24, 96)},
        "(school_boxes + gift_boxes) * crayons_per_box",
        shape_of_template="wp01",
    ),
    StoryTemplate(
        "wp01_s10",
        "In a greenhouse every seed tray holds {seedlings_per_tray} seedlings. This spring the growers sowed "
        "{pepper_trays} trays of peppers and {tomato_trays} trays of tomatoes. Find the total number of "
        "seedlings they raised.",
        {"seedlings_per_tray": (24, 96), "pepper_trays": N3, "tomato_trays": N3},
        "seedlings_per_tray * (tomato_trays + pepper_trays)",
        shape_of_template="wp01",
    ),
    StoryTemplate(
        "wp01_s11",
        "Over the school year {name} photographed {junior_classes} junior classes and {senior_classes} senior "
        "classes, taking {shots_per_class} photos of each class. How many photos was that?",
        {"junior_classes": N3, "senior_classes": N3, "shots_per_class": (24, 96)},
        "shots_per_class * (senior_classes + junior_classes)",
        shape_of_template="wp01",
    ),
    # --- wp02: per_day * days // carton ---
    StoryTemplate(
        "wp02_s1",
        "Candles are sold in gift boxes of {per_gift_box}, and a box is only sold when it is full. If a "
        "workshop pours {candles_daily} candles on each of {workdays} working days, how many full gift boxes "
        "can it sell?",
        {"per_gift_box": (12, 30), "candles_daily": N4, "workdays": (14, 60)},
        "candles_daily * workdays // per_gift_box",
        shape_of_template="wp02",
    ),
    StoryTemplate(
        "wp02_s2",
        "How many whole litres of orange juice can a juice bar press in {opening_days} days, if it gets "
        "through {oranges_daily} oranges a day and needs {oranges_per_litre} oranges for every litre?",
        {"opening_days": (14, 60), "oranges_daily": N4, "oranges_per_litre": (12, 30)},
        "oranges_daily * opening_days // oranges_per_litre",
        shape_of_template="wp02",
    ),
    StoryTemplate(
        "wp02_s3",
        "A survey drone takes {photos_per_flight} photos on each flight. After {flights} flights, the photos "
        "are printed in albums of {photos_per_album}, and only complete albums are bound. How many albums "
        "are bound?",
        {"photos_per_flight": N4, "flights": (14, 60), "photos_per_album": (12, 30)},
        "photos_per_flight * flights // photos_per_album",
        shape_of_template="wp02",
    ),
    StoryTemplate(
        "wp02_s4",
        "Spaghetti leaves a pasta factory only in full boxes of {box_kg} kilograms. This week its line turned "
        "out {kg_per_hour} kilograms an hour for {hours_run} hours. How many full boxes can it ship from this "
        "week's output?",
        {"box_kg": (12, 30), "kg_per_hour": N4, "hours_run": (14, 60)},
        "kg_per_hour * hours_run // box_kg",
        shape_of_template="wp02",
    ),
    StoryTemplate(
        "wp02_s5",
        "{name}'s brewery brewed {brews} batches of ale, {litres_per_brew} litres per batch. The ale is racked "
        "into barrels of {barrel_litres} litres, and any ale short of a full barrel is poured away. How many "
        "full barrels are filled?",
        {"brews": (14, 60), "litres_per_brew": N4, "barrel_litres": (12, 30)},
        "brews * litres_per_brew // barrel_litres",
        shape_of_template="wp02",
    ),
    StoryTemplate(
        "wp02_s6",
        "A mint strikes {medals_daily} medals a day for {mint_days} days and seals them in tubes of {per_tube}, "
        "keeping only full tubes. How many full tubes does it seal?",
        {"medals_daily": N4, "mint_days": (14, 60), "per_tube": (12, 30)},
        "medals_daily * mint_days // per_tube",
        shape_of_template="wp02",
    ),
    StoryTemplate(
        "wp02_s7",
        "A pet-food plant makes {biscuits_kg} kilograms of dog biscuits every day. The biscuits are bagged in "
        "sacks of {sack_kg} kilograms, and part-filled sacks are never sold. How many sacks can be sold after "
        "{production_days} days of production?",
        {"biscuits_kg": N4, "sack_kg": (12, 30), "production_days": (14, 60)},
        "production_days * biscuits_kg // sack_kg",
        shape_of_template="wp02",
    ),
    StoryTemplate(
        "wp02_s8",
        "The ice machine in a bar makes {cubes_per_hour} ice cubes an hour. The cubes are bagged "
        "{cubes_per_bag} to a bag, and only full bags go into the freezer. How many full bags does the machine "
        "fill in {running_hours} hours?",
        {"cubes_per_hour": N4, "cubes_per_bag": (12, 30), "running_hours": (14, 60)},
        "cubes_per_hour * running_hours // cubes_per_bag",
        shape_of_template="wp02",
    ),
    StoryTemplate(
        "wp02_s9",
        "How many full crates of {melons_per_crate} melons can {name} pack after picking {melons_daily} melons "
        "a day for {picking_days} days?",
        {"melons_per_crate": (12, 30), "melons_daily": N4, "picking_days": (14, 60)},
        "melons_daily * picking_days // melons_per_crate",
        shape_of_template="wp02",
    ),
    StoryTemplate(
        "wp02_s10",
        "Every hour for {shift_hours} hours a match factory turns out {matches_hourly} matches. They are packed "
        "{per_matchbox} to a matchbox, and a matchbox goes on sale only when it is full. How many matchboxes "
        "go on sale?",
        {"shift_hours": (14, 60), "matches_hourly": N4, "per_matchbox": (12, 30)},
        "matches_hourly * shift_hours // per_matchbox",
        shape_of_template="wp02",
    ),
    StoryTemplate(
        "wp02_s11",
        "A dumpling kitchen folds {dumplings_daily} dumplings a day. After {folding_days} days, how many full "
        "freezer bags of {per_freezer_bag} dumplings can it fill?",
        {"dumplings_daily": N4, "folding_days": (14, 60), "per_freezer_bag": (12, 30)},
        "dumplings_daily * folding_days // per_freezer_bag",
        shape_of_template="wp02",
    ),
    # --- wp03: balance + deposit * months ---
    StoryTemplate(
        "wp03_s1",
        "A freight locomotive's odometer reads {reading} kilometres, and it covers {km_per_trip} kilometres "
        "on each round trip. What will the odometer read after {round_trips} more round trips?",
        {"reading": N5, "km_per_trip": (100, 9999), "round_trips": (12, 60)},
        "reading + km_per_trip * round_trips",
        shape_of_template="wp03",
    ),
    StoryTemplate(
        "wp03_s2",
        "{name} already has {points} points on a coffee-shop loyalty card and earns {points_per_visit} points "
        "with every visit. How many points will the card show after {visits} more visits?",
        {"points": N5, "points_per_visit": (100, 9999), "visits": (12, 60)},
        "points + points_per_visit * visits",
        shape_of_template="wp03",
    ),
    StoryTemplate(
        "wp03_s3",
        "After {weeks} more weeks of gaining {new_per_week} subscribers every week, how many subscribers will "
        "a video channel have if it has {subscribers} today?",
        {"weeks": (12, 60), "new_per_week": (100, 9999), "subscribers": N5},
        "new_per_week * weeks + subscribers",
        shape_of_template="wp03",
    ),
    StoryTemplate(
        "wp03_s4",
        "Each day {name} walks {steps_daily} steps. The step counter's running total stands at {steps_total} "
        "steps right now. What total will it show after another {walk_days} days of walking?",
        {"steps_daily": (100, 9999), "steps_total": N5, "walk_days": (12, 60)},
        "steps_total + steps_daily * walk_days",
        shape_of_template="wp03",
    ),
    StoryTemplate(
        "wp03_s5",
        "A tunnel-boring machine extends a tunnel by {cm_per_shift} centimetres every shift. The tunnel is "
        "{length_cm} centimetres long before the next {shifts} shifts begin. How long, in centimetres, will "
        "it be when they end?",
        {"cm_per_shift": (100, 9999), "length_cm": N5, "shifts": (12, 60)},
        "length_cm + cm_per_shift * shifts",
        shape_of_template="wp03",
    ),
    StoryTemplate(
        "wp03_s6",
        "A landfill site holds {landfill_tonnes} tonnes of rubbish and takes in {tonnes_weekly} tonnes a week. "
        "How many tonnes will it hold after {landfill_weeks} more weeks?",
        {"landfill_tonnes": N5, "tonnes_weekly": (100, 9999), "landfill_weeks": (12, 60)},
        "landfill_tonnes + tonnes_weekly * landfill_weeks",
        shape_of_template="wp03",
    ),
    StoryTemplate(
        "wp03_s7",
        "{name}'s swimming log shows {metres_logged} metres swum so far this year. Each training session adds "
        "{metres_per_session} metres. How many metres will the log show after {sessions} more sessions?",
        {"metres_logged": N5, "metres_per_session": (100, 9999), "sessions": (12, 60)},
        "metres_per_session * sessions + metres_logged",
        shape_of_template="wp03",
    ),
    StoryTemplate(
        "wp03_s8",
        "What will the gate counter of a botanical garden show after another {open_days} open days, if it "
        "shows {visitors_so_far} visitors now and {visitors_daily} people come through the gate each day?",
        {"open_days": (12, 60), "visitors_so_far": N5, "visitors_daily": (100, 9999)},
        "visitors_so_far + open_days * visitors_daily",
        shape_of_template="wp03",
    ),
    StoryTemplate(
        "wp03_s9",
        "A toll bridge has counted {crossings} crossings since it opened, and {cars_daily} cars cross it every "
        "day. What will the count be {toll_days} days from now?",
        {"crossings": N5, "cars_daily": (100, 9999), "toll_days": (12, 60)},
        "crossings + cars_daily * toll_days",
        shape_of_template="wp03",
    ),
    StoryTemplate(
        "wp03_s10",
        "Every month since a new town was founded, {newcomers} people have moved in and nobody has moved "
        "out. On its founding day the town had {residents} residents. How many residents does it have "
        "{town_months} months later?",
        {"newcomers": (100, 9999), "residents": N5, "town_months": (12, 60)},
        "residents + newcomers * town_months",
        shape_of_template="wp03",
    ),
    StoryTemplate(
        "wp03_s11",
        "A space probe is {probe_km} kilometres from its launch pad and flies straight on at {km_per_hour} "
        "kilometres an hour. How far from the pad is it {flight_hours} hours later?",
        {"probe_km": N5, "km_per_hour": (100, 9999), "flight_hours": (12, 60)},
        "probe_km + km_per_hour * flight_hours",
        shape_of_template="wp03",
    ),
    # --- wp04: (filled - cracked) // per_case ---
    StoryTemplate(
        "wp04_s1",
        "A chocolate factory moulded {bars} bars today and melted down {misshapen} misshapen ones. The good "
        "bars are packed {bars_per_box} to a box. How many full boxes can be packed?",
        {"bars": N6, "misshapen": N4, "bars_per_box": (12, 48)},
        "(bars - misshapen) // bars_per_box",
        shape_of_template="wp04",
    ),
    StoryTemplate(
        "wp04_s2",
        "Saplings leave a forestry nursery in bundles of exactly {per_bundle}. Of the {saplings} saplings "
        "grown this year, {frosted} were killed by frost. How many complete bundles can be sent out?",
        {"per_bundle": (12, 48), "saplings": N6, "frosted": N4},
        "(saplings - frosted) // per_bundle",
        shape_of_template="wp04",
    ),
    StoryTemplate(
        "wp04_s3",
        "How many complete necklaces of {beads_per_necklace} beads can a jewellery workshop thread from "
        "{beads} beads, once {chipped} chipped beads have been picked out?",
        {"beads_per_necklace": (12, 48), "beads": N6, "chipped": N4},
        "(beads - chipped) // beads_per_necklace",
        shape_of_template="wp04",
    ),
    StoryTemplate(
        "wp04_s4",
        "{damp_grams} grams of a tea packer's {tea_grams} grams of leaf were spoiled by damp and thrown out. "
        "The remaining tea goes into sachets of {sachet_grams} grams; how many sachets can be filled "
        "completely?",
        {"damp_grams": N4, "tea_grams": N6, "sachet_grams": (12, 48)},
        "(tea_grams - damp_grams) // sachet_grams",
        shape_of_template="wp04",
    ),
    StoryTemplate(
        "wp04_s5",
        "Find how many full reels of {reel_metres} metres a cable works can wind, given that it extruded "
        "{cable_metres} metres of cable and cut out {faulty_metres} faulty metres.",
        {"reel_metres": (12, 48), "cable_metres": N6, "faulty_metres": N4},
        "(cable_metres - faulty_metres) // reel_metres",
        shape_of_template="wp04",
    ),
    StoryTemplate(
        "wp04_s6",
        "A coat-hanger factory made {hangers} hangers, and {snapped} of them snapped during testing. How many "
        "full bundles of {hangers_per_bundle} hangers can it pack from the rest?",
        {"hangers": N6, "snapped": N4, "hangers_per_bundle": (12, 48)},
        "(hangers - snapped) // hangers_per_bundle",
        shape_of_template="wp04",
    ),
    StoryTemplate(
        "wp04_s7",
        "Tyres leave a factory in stacks of exactly {tyres_per_stack}, and an incomplete stack stays behind. "
        "This month the factory built {tyres} tyres, and {rejected_tyres} of them failed inspection. How many "
        "complete stacks leave the factory?",
        {"tyres_per_stack": (12, 48), "tyres": N6, "rejected_tyres": N4},
        "(tyres - rejected_tyres) // tyres_per_stack",
        shape_of_template="wp04",
    ),
    StoryTemplate(
        "wp04_s8",
        "How many complete battery packs can be assembled, if each pack takes {cells_per_pack} cells and a "
        "battery plant made {cells} cells, of which {dead_cells} failed testing?",
        {"cells_per_pack": (12, 48), "cells": N6, "dead_cells": N4},
        "(cells - dead_cells) // cells_per_pack",
        shape_of_template="wp04",
    ),
    StoryTemplate(
        "wp04_s9",
        "A vaccine plant filled {vials} vials, but {leaking_vials} leaked and were destroyed. How many full "
        "trays of {vials_per_tray} vials can it ship?",
        {"vials": N6, "leaking_vials": N4, "vials_per_tray": (12, 48)},
        "(vials - leaking_vials) // vials_per_tray",
        shape_of_template="wp04",
    ),
    StoryTemplate(
        "wp04_s10",
        "{shrivelled} of the {walnuts} walnuts a nut processor cracked this week were shrivelled and thrown "
        "out. The good ones are bagged {walnuts_per_bag} to a bag. Find how many bags can be filled completely.",
        {"shrivelled": N4, "walnuts": N6, "walnuts_per_bag": (12, 48)},
        "(walnuts - shrivelled) // walnuts_per_bag",
        shape_of_template="wp04",
    ),
    StoryTemplate(
        "wp04_s11",
        "A toothbrush factory moulded {toothbrushes} toothbrushes and scrapped {bent} with bent bristles. The "
        "rest are sold in multipacks of {per_multipack}; how many complete multipacks can be made?",
        {"toothbrushes": N6, "bent": N4, "per_multipack": (12, 48)},
        "(toothbrushes - bent) // per_multipack",
        shape_of_template="wp04",
    ),
    # --- wp05: per_day * days - done ---
    StoryTemplate(
        "wp05_s1",
        "An insurance office must key in {records_daily} claim records on each of {workdays} working days. "
        "It has keyed in {keyed} records so far. How many records are still to be keyed in?",
        {"records_daily": N5, "workdays": (20, 60), "keyed": N5},
        "records_daily * workdays - keyed",
        shape_of_template="wp05",
    ),
    StoryTemplate(
        "wp05_s2",
        "How many leaflets are still to be delivered? A campaign planned {rounds} delivery rounds of "
        "{per_round} leaflets each, and volunteers have already pushed {posted} through letterboxes.",
        {"rounds": (20, 60), "per_round": N5, "posted": N5},
        "rounds * per_round - posted",
        shape_of_template="wp05",
    ),
    StoryTemplate(
        "wp05_s3",
        "So far the census takers have visited {visited} households. Their schedule is {households_daily} "
        "households a day for {survey_days} days. How many households on the schedule have not yet been "
        "visited?",
        {"visited": N5, "households_daily": N5, "survey_days": (20, 60)},
        "households_daily * survey_days - visited",
        shape_of_template="wp05",
    ),
    StoryTemplate(
        "wp05_s4",
        "{name} means to sow {seeds_per_field} sunflower seeds in each of {fields} fields and has sown {sown} "
        "seeds already. How many seeds are left to sow?",
        {"seeds_per_field": N5, "fields": (20, 60), "sown": N5},
        "seeds_per_field * fields - sown",
        shape_of_template="wp05",
    ),
    StoryTemplate(
        "wp05_s5",
        "For a sky survey an observatory will catalogue {stars_nightly} stars on each of {clear_nights} clear "
        "nights. With {catalogued} of those stars already catalogued, how many of the planned stars remain?",
        {"stars_nightly": N5, "clear_nights": (20, 60), "catalogued": N5},
        "clear_nights * stars_nightly - catalogued",
        shape_of_template="wp05",
    ),
    StoryTemplate(
        "wp05_s6",
        "A novelist plans {chapters} chapters of {words_per_chapter} words each and has written {words_written} "
        "words so far. How many words are left to write?",
        {"chapters": (20, 60), "words_per_chapter": N5, "words_written": N5},
        "chapters * words_per_chapter - words_written",
        shape_of_template="wp05",
    ),
    StoryTemplate(
        "wp05_s7",
        "Engineers building a dam will pour {concrete_daily} tonnes of concrete on each of {pour_days} days. "
        "They have poured {poured} tonnes so far. How many tonnes are still to be poured?",
        {"concrete_daily": N5, "pour_days": (20, 60), "poured": N5},
        "concrete_daily * pour_days - poured",
        shape_of_template="wp05",
    ),
    StoryTemplate(
        "wp05_s8",
        "A genome lab must sequence {samples_per_run} DNA samples in each of {runs} runs. With {sequenced} "
        "samples done, how many are left?",
        {"samples_per_run": N5, "runs": (20, 60), "sequenced": N5},
        "runs * samples_per_run - sequenced",
        shape_of_template="wp05",
    ),
    StoryTemplate(
        "wp05_s9",
        "How many tonnes of silt are still to be dredged from a harbour, if the contract says {silt_weekly} "
        "tonnes a week for {contract_weeks} weeks and the dredger has removed {dredged} tonnes so far?",
        {"silt_weekly": N5, "contract_weeks": (20, 60), "dredged": N5},
        "silt_weekly * contract_weeks - dredged",
        shape_of_template="wp05",
    ),
    StoryTemplate(
        "wp05_s10",
        "So far a food bank's volunteers have handed out {meals_given} meals. The food bank promised "
        "{meals_weekly} meals a week for {weeks_promised} weeks. How many of the promised meals are still to come?",
        {"meals_given": N5, "meals_weekly": N5, "weeks_promised": (20, 60)},
        "meals_weekly * weeks_promised - meals_given",
        shape_of_template="wp05",
    ),
    StoryTemplate(
        "wp05_s11",
        "A boot maker has {orders} orders to fill, each for {pairs_per_order} pairs of boots, and has already "
        "made {pairs_made} pairs towards them. How many pairs are still to be made?",
        {"orders": (20, 60), "pairs_per_order": N5, "pairs_made": N5},
        "orders * pairs_per_order - pairs_made",
        shape_of_template="wp05",
    ),
    # --- wp08: start + unloaded - loaded ---
    StoryTemplate(
        "wp08_s1",
        "A city library service owned {books_owned} books on 1 January. During the year it bought "
        "{books_bought} new books and withdrew {books_withdrawn} worn-out ones. How many books did it own at "
        "the end of the year?",
        {"books_owned": (50_000, 99_999), "books_bought": (50_000, 99_999), "books_withdrawn": N5},
        "books_owned + books_bought - books_withdrawn",
        shape_of_template="wp08",
    ),
    StoryTemplate(
        "wp08_s2",
        "In a role-playing game {name} had {xp_before} experience points before a long quest. The quest "
        "earned {xp_earned} points, and afterwards {name} spent {xp_spent} points on new skills. How many "
        "points does {name} have now?",
        {"xp_before": (50_000, 99_999), "xp_earned": (50_000, 99_999), "xp_spent": N5},
        "xp_before + xp_earned - xp_spent",
        shape_of_template="wp08",
    ),
    StoryTemplate(
        "wp08_s3",
        "How many ants live in a colony at the end of summer if it had {ants_spring} ants in spring, and over "
        "the summer {ants_hatched} new ants hatched while {ants_lost} died?",
        {"ants_spring": (50_000, 99_999), "ants_hatched": (50_000, 99_999), "ants_lost": N5},
        "ants_hatched + ants_spring - ants_lost",
        shape_of_template="wp08",
    ),
    StoryTemplate(
        "wp08_s4",
        "This month a cold store shipped {shipped_kg} kilograms of potatoes to supermarkets and took in "
        "{delivered_kg} kilograms from farmers. At the start of the month it held {stored_kg} kilograms. What "
        "weight of potatoes, in kilograms, does it hold now?",
        {"shipped_kg": N5, "delivered_kg": (50_000, 99_999), "stored_kg": (50_000, 99_999)},
        "stored_kg + delivered_kg - shipped_kg",
        shape_of_template="wp08",
    ),
    StoryTemplate(
        "wp08_s5",
        "A support team's shared inbox held {unread} unread emails on Friday evening. Over the weekend "
        "{arrived} more arrived, and a spam filter deleted {deleted} of the unread emails. How many unread "
        "emails are waiting on Monday morning?",
        {"unread": (50_000, 99_999), "arrived": (50_000, 99_999), "deleted": N5},
        "unread + arrived - deleted",
        shape_of_template="wp08",
    ),
    StoryTemplate(
        "wp08_s6",
        "A stationery warehouse held {envelopes} envelopes on Monday. That week it received {envelopes_in} and "
        "sent out {envelopes_out}. How many envelopes did it hold at the end of the week?",
        {"envelopes": (50_000, 99_999), "envelopes_in": (50_000, 99_999), "envelopes_out": N5},
        "envelopes + envelopes_in - envelopes_out",
        shape_of_template="wp08",
    ),
    StoryTemplate(
        "wp08_s7",
        "Anglers caught and kept {fish_caught} fish from a lake this season, while the water authority "
        "stocked it with {fish_stocked} young trout. The lake held {fish_start} fish when the season opened. "
        "Counting only these changes, how many fish does it hold now?",
        {"fish_caught": N5, "fish_stocked": (50_000, 99_999), "fish_start": (50_000, 99_999)},
        "fish_start + fish_stocked - fish_caught",
        shape_of_template="wp08",
    ),
    StoryTemplate(
        "wp08_s8",
        "How many pressed plant specimens does a herbarium hold now, if it held {specimens} a year ago, has "
        "since added {collected} from field expeditions and has given {given_away} away to other herbaria?",
        {"specimens": (50_000, 99_999), "collected": (50_000, 99_999), "given_away": N5},
        "specimens + collected - given_away",
        shape_of_template="wp08",
    ),
    StoryTemplate(
        "wp08_s9",
        "A herd of wildebeest numbered {herd} when its migration began. Along the way {calves} calves were "
        "born and {lost} animals were lost to predators and river crossings. How many wildebeest finished the "
        "migration?",
        {"herd": (50_000, 99_999), "calves": (50_000, 99_999), "lost": N5},
        "calves + herd - lost",
        shape_of_template="wp08",
    ),
    StoryTemplate(
        "wp08_s10",
        "By noon, homes had drawn {drawn_off} litres from a town's water tower and pumps had added {pumped_in} "
        "litres. It held {tower_litres} litres at midnight. What did the tower hold at noon, in litres?",
        {"drawn_off": N5, "pumped_in": (50_000, 99_999), "tower_litres": (50_000, 99_999)},
        "tower_litres + pumped_in - drawn_off",
        shape_of_template="wp08",
    ),
    StoryTemplate(
        "wp08_s11",
        "A coffee roastery had {green_kg} kilograms of green beans, bought {bought_kg} more and roasted "
        "{roasted_kg}. How many kilograms of green beans are left?",
        {"green_kg": (50_000, 99_999), "bought_kg": (50_000, 99_999), "roasted_kg": N5},
        "bought_kg + green_kg - roasted_kg",
        shape_of_template="wp08",
    ),
    # --- wp09: fund // clubs // players (exact) ---
    StoryTemplate(
        "wp09_s1",
        "A company shares a bonus pool of {bonus_pool} euros equally among its {departments} departments, and "
        "every department shares its part equally among its {staff} staff. How many euros does each staff "
        "member receive?",
        {"bonus_pool": N6, "departments": (12, 24), "staff": (11, 30)},
        "bonus_pool // departments // staff",
        exact=(("bonus_pool", "bonus_pool % (departments * staff)"),),
        shape_of_template="wp09",
    ),
    StoryTemplate(
        "wp09_s2",
        "How many kilograms of lentils does each family get when a relief agency divides {lentils_kg} "
        "kilograms exactly equally among {camps} camps, and each camp divides its share exactly equally among "
        "{families} families?",
        {"lentils_kg": N6, "camps": (12, 24), "families": (11, 30)},
        "lentils_kg // camps // families",
        exact=(("lentils_kg", "lentils_kg % (camps * families)"),),
        shape_of_template="wp09",
    ),
    StoryTemplate(
        "wp09_s3",
        "Each of a hotel chain's {hotels} hotels has {floors} floors. The chain's order of {towels} new towels "
        "is split equally between the hotels, and then each hotel splits its share equally between its "
        "floors. How many new towels go to each floor?",
        {"hotels": (12, 24), "floors": (11, 30), "towels": N6},
        "towels // hotels // floors",
        exact=(("towels", "towels % (hotels * floors)"),),
        shape_of_template="wp09",
    ),
    StoryTemplate(
        "wp09_s4",
        "A mapping project allocates {map_squares} map squares in equal numbers to its {teams} teams. Every "
        "team has {volunteers} volunteers and hands each of them the same number of its squares. How many "
        "squares does one volunteer map?",
        {"map_squares": N6, "teams": (12, 24), "volunteers": (11, 30)},
        "map_squares // teams // volunteers",
        exact=(("map_squares", "map_squares % (teams * volunteers)"),),
        shape_of_template="wp09",
    ),
    StoryTemplate(
        "wp09_s5",
        "A load balancer spreads {requests} requests evenly over {clusters} clusters; inside each cluster the "
        "requests are spread evenly over {servers} servers, with none left over anywhere. How many requests "
        "does each server handle?",
        {"requests": N6, "clusters": (12, 24), "servers": (11, 30)},
        "requests // clusters // servers",
        exact=(("requests", "requests % (clusters * servers)"),),
        shape_of_template="wp09",
    ),
    StoryTemplate(
        "wp09_s6",
        "{marbles} marbles are shared exactly equally among {jars} jars, and each jar's marbles are shared "
        "exactly equally among {bags} bags. How many marbles end up in each bag?",
        {"marbles": N6, "jars": (12, 24), "bags": (11, 30)},
        "marbles // jars // bags",
        exact=(("marbles", "marbles % (jars * bags)"),),
        shape_of_template="wp09",
    ),
    StoryTemplate(
        "wp09_s7",
        "A research council divides a grant of {grant} euros equally among {universities} universities. Each "
        "university then divides its part equally among its {labs} laboratories. How many euros does one "
        "laboratory get?",
        {"grant": N6, "universities": (12, 24), "labs": (11, 30)},
        "grant // universities // labs",
        exact=(("grant", "grant % (universities * labs)"),),
        shape_of_template="wp09",
    ),
    StoryTemplate(
        "wp09_s8",
        "How many face masks does each nurse receive, if a health board shares {face_masks} masks exactly "
        "equally among its {clinics} clinics and every clinic shares its masks exactly equally among its "
        "{nurses} nurses?",
        {"face_masks": N6, "clinics": (12, 24), "nurses": (11, 30)},
        "face_masks // clinics // nurses",
        exact=(("face_masks", "face_masks % (clinics * nurses)"),),
        shape_of_template="wp09",
    ),
    StoryTemplate(
        "wp09_s9",
        "Each of a farming co-operative's {farms} member farms has {paddocks} paddocks. The co-operative shares "
        "{fertiliser_kg} kilograms of fertiliser equally among the farms, and each farm spreads its share "
        "equally over its paddocks. How many kilograms go on each paddock?",
        {"farms": (12, 24), "paddocks": (11, 30), "fertiliser_kg": N6},
        "fertiliser_kg // farms // paddocks",
        exact=(("fertiliser_kg", "fertiliser_kg % (farms * paddocks)"),),
        shape_of_template="wp09",
    ),
    StoryTemplate(
        "wp09_s10",
        "A radio station splits {airtime} seconds of advertising time equally among {sponsors} sponsors, and "
        "each sponsor splits its time equally among {adverts} adverts. How many seconds does each advert get?",
        {"airtime": N6, "sponsors": (12, 24), "adverts": (11, 30)},
        "airtime // sponsors // adverts",
        exact=(("airtime", "airtime % (sponsors * adverts)"),),
        shape_of_template="wp09",
    ),
    StoryTemplate(
        "wp09_s11",
        "A scout association hands {raffle_tickets} raffle tickets out equally to its {troops} troops, and "
        "every troop shares its tickets equally among its {scouts} scouts. How many tickets does each scout "
        "have to sell?",
        {"raffle_tickets": N6, "troops": (12, 24), "scouts": (11, 30)},
        "raffle_tickets // troops // scouts",
        exact=(("raffle_tickets", "raffle_tickets % (troops * scouts)"),),
        shape_of_template="wp09",
    ),
    # --- wp10: (laid_a + laid_b) // gap ---
    StoryTemplate(
        "wp10_s1",
        "Two presses printed {pages_press_a} and {pages_press_b} pages of a manual. The pages are stitched "
        "into booklets of {pages_per_booklet} pages. How many complete booklets can be stitched?",
        {"pages_press_a": N5, "pages_press_b": N5, "pages_per_booklet": (25, 99)},
        "(pages_press_a + pages_press_b) // pages_per_booklet",
        shape_of_template="wp10",
    ),
    StoryTemplate(
        "wp10_s2",
        "How many full punnets of {per_punnet} strawberries can a farm shop fill, if {name} picked "
        "{berries_morning} strawberries in the morning and {berries_evening} in the evening?",
        {"per_punnet": (25, 99), "berries_morning": N5, "berries_evening": N5},
        "(berries_morning + berries_evening) // per_punnet",
        shape_of_template="wp10",
    ),
    StoryTemplate(
        "wp10_s3",
        "A phone company bills calls in complete blocks of {block_minutes} minutes, ignoring any part-block. "
        "A customer's landline logged {minutes_home} minutes this month and the mobile {minutes_mobile} "
        "minutes, and the two are added together before billing. How many complete blocks are billed?",
        {"block_minutes": (25, 99), "minutes_home": N5, "minutes_mobile": N5},
        "(minutes_mobile + minutes_home) // block_minutes",
        shape_of_template="wp10",
    ),
    StoryTemplate(
        "wp10_s4",
        "{paper_sat} kilograms of waste paper came in on Saturday and {paper_sun} kilograms on Sunday. A "
        "recycling centre presses its paper into bales of {bale_kg} kilograms; how many complete bales can it "
        "press from the weekend's paper?",
        {"paper_sat": N5, "paper_sun": N5, "bale_kg": (25, 99)},
        "(paper_sat + paper_sun) // bale_kg",
        shape_of_template="wp10",
    ),
    StoryTemplate(
        "wp10_s5",
        "Birdsong recordings are cut into clips of exactly {clip_seconds} seconds, and any seconds left over "
        "are discarded. Two microphones in a wood recorded {seconds_oak} and {seconds_pine} seconds, joined "
        "end to end before cutting. How many full clips result?",
        {"clip_seconds": (25, 99), "seconds_oak": N5, "seconds_pine": N5},
        "(seconds_oak + seconds_pine) // clip_seconds",
        shape_of_template="wp10",
    ),
    StoryTemplate(
        "wp10_s6",
        "A nursery school mixes {apple_ml} millilitres of apple juice with {orange_ml} millilitres of orange "
        "juice in one big jug. How many full cups of {cup_ml} millilitres can it pour?",
        {"apple_ml": N5, "orange_ml": N5, "cup_ml": (25, 99)},
        "(apple_ml + orange_ml) // cup_ml",
        shape_of_template="wp10",
    ),
    StoryTemplate(
        "wp10_s7",
        "The skating circuit at an ice rink is {circuit_metres} metres long. {name} skated {before_lunch} "
        "metres before lunch and {after_lunch} metres after it, picking up where she had stopped. How many "
        "complete circuits did she skate?",
        {"circuit_metres": (25, 99), "before_lunch": N5, "after_lunch": N5},
        "(before_lunch + after_lunch) // circuit_metres",
        shape_of_template="wp10",
    ),
    StoryTemplate(
        "wp10_s8",
        "A butcher minces {pork_grams} grams of pork and {beef_grams} grams of beef and mixes them together. "
        "Each sausage takes {sausage_grams} grams of the mix. How many whole sausages can be made?",
        {"pork_grams": N5, "beef_grams": N5, "sausage_grams": (25, 99)},
        "(beef_grams + pork_grams) // sausage_grams",
        shape_of_template="wp10",
    ),
    StoryTemplate(
        "wp10_s9",
        "How many complete figurines of {figurine_grams} grams can a foundry cast, if it melts down "
        "{scrap_pewter} grams of scrap pewter together with {new_pewter} grams of new pewter?",
        {"figurine_grams": (25, 99), "scrap_pewter": N5, "new_pewter": N5},
        "(scrap_pewter + new_pewter) // figurine_grams",
        shape_of_template="wp10",
    ),
    StoryTemplate(
        "wp10_s10",
        "Two tankers pump {oil_first} and {oil_second} litres of heating oil into a school's empty tank. The "
        "boiler burns {litres_hourly} litres an hour. For how many full hours can it run?",
        {"oil_first": N5, "oil_second": N5, "litres_hourly": (25, 99)},
        "(oil_first + oil_second) // litres_hourly",
        shape_of_template="wp10",
    ),
    StoryTemplate(
        "wp10_s11",
        "A sand artist stirs {red_sand} grams of red sand into {white_sand} grams of white sand and fills "
        "bottles of {bottle_grams} grams with the mixture. How many bottles can she fill to the top?",
        {"red_sand": N5, "white_sand": N5, "bottle_grams": (25, 99)},
        "(white_sand + red_sand) // bottle_grams",
        shape_of_template="wp10",
    ),
    # --- wp12: harvest - bruised - sold ---
    StoryTemplate(
        "wp12_s1",
        "A music festival has {tickets} tickets in all. Sponsors receive {sponsor_tickets} of them and "
        "{presale_tickets} are sold in a presale. How many tickets are left for general sale?",
        {"tickets": (500_000, 999_999), "sponsor_tickets": N5, "presale_tickets": N5},
        "tickets - sponsor_tickets - presale_tickets",
        shape_of_template="wp12",
    ),
    StoryTemplate(
        "wp12_s2",
        "How many litres of white paint does a paint wholesaler have left, if it began the season with "
        "{paint_litres} litres and has delivered {to_diy} litres to DIY stores and {to_decorators} litres to "
        "decorators?",
        {"paint_litres": (500_000, 999_999), "to_diy": N5, "to_decorators": N5},
        "paint_litres - to_diy - to_decorators",
        shape_of_template="wp12",
    ),
    StoryTemplate(
        "wp12_s3",
        "In a two-candidate election {ballots} ballots were cast. {spoiled} of them were spoiled, and "
        "{votes_first} valid votes went to the first candidate. How many votes did the second candidate "
        "receive?",
        {"ballots": (500_000, 999_999), "spoiled": N5, "votes_first": N5},
        "ballots - spoiled - votes_first",
        shape_of_template="wp12",
    ),
    StoryTemplate(
        "wp12_s4",
        "{exported_kg} kilograms of a sugar mill's output were exported and {local_kg} kilograms were sold "
        "locally. The mill refined {refined_kg} kilograms of sugar this season. How many kilograms are still "
        "unsold?",
        {"exported_kg": N5, "local_kg": N5, "refined_kg": (500_000, 999_999)},
        "refined_kg - exported_kg - local_kg",
        shape_of_template="wp12",
    ),
    StoryTemplate(
        "wp12_s5",
        "A nature reserve covers {reserve_m2} square metres. A lake takes up {lake_m2} square metres and "
        "marshland {marsh_m2} square metres; the rest is woodland. What is the area of the woodland in "
        "square metres?",
        {"reserve_m2": (500_000, 999_999), "lake_m2": N5, "marsh_m2": N5},
        "reserve_m2 - lake_m2 - marsh_m2",
        shape_of_template="wp12",
    ),
    StoryTemplate(
        "wp12_s6",
        "An umbrella maker made {umbrellas} umbrellas, sold {to_stores} to department stores and {to_tourists} "
        "to tourists. How many umbrellas are unsold?",
        {"umbrellas": (500_000, 999_999), "to_stores": N5, "to_tourists": N5},
        "umbrellas - to_stores - to_tourists",
        shape_of_template="wp12",
    ),
    StoryTemplate(
        "wp12_s7",
        "A passport office had {blank_passports} blank passports at the start of the year. Since then it has "
        "issued {adult_passports} adult passports and {child_passports} child passports. How many blank "
        "passports does it have left?",
        {"blank_passports": (500_000, 999_999), "adult_passports": N5, "child_passports": N5},
        "blank_passports - adult_passports - child_passports",
        shape_of_template="wp12",
    ),
    StoryTemplate(
        "wp12_s8",
        "A cotton gin shipped {to_spinners} kilograms of cotton to spinning mills and {to_export} kilograms "
        "abroad. It ginned {cotton_kg} kilograms in all this season. How many kilograms of cotton are still at "
        "the gin?",
        {"to_spinners": N5, "to_export": N5, "cotton_kg": (500_000, 999_999)},
        "cotton_kg - to_export - to_spinners",
        shape_of_template="wp12",
    ),
    StoryTemplate(
        "wp12_s9",
        "How many applicants did a university accept, if it received {applications} applications, turned down "
        "{turned_down} of them, put {waitlisted} on a waiting list and accepted all the rest?",
        {"applications": (500_000, 999_999), "turned_down": N5, "waitlisted": N5},
        "applications - turned_down - waitlisted",
        shape_of_template="wp12",
    ),
    StoryTemplate(
        "wp12_s10",
        "{name}'s hard drive holds {drive_mb} megabytes. Films fill {films_mb} megabytes and music "
        "{music_mb}. How many megabytes are free?",
        {"drive_mb": (500_000, 999_999), "films_mb": N5, "music_mb": N5},
        "drive_mb - films_mb - music_mb",
        shape_of_template="wp12",
    ),
    StoryTemplate(
        "wp12_s11",
        "A dictionary has {entries} entries. {noun_entries} of them are nouns and {verb_entries} are verbs; "
        "the others belong to the remaining parts of speech. How many entries are neither nouns nor verbs?",
        {"entries": (500_000, 999_999), "noun_entries": N5, "verb_entries": N5},
        "entries - noun_entries - verb_entries",
        shape_of_template="wp12",
    ),
]
