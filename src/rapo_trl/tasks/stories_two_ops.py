"""New stories for the two-operation training shapes of word_problems (see word_problems.py): five per shape."""
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
]
