package dev.lockstep.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.lockstep.spark.KafkaRangesSource.Range;
import dev.lockstep.spark.KafkaRangesSource.RangeGroup;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * How the reader spreads a checkpoint's ranges over its tasks ({@link KafkaRangesSource#group}): at most
 * {@code tasks} groups, each source partition whole in exactly one (its records stay in one task, in
 * order, and so in one transaction), empty ranges left out, record counts about even.
 */
class RangeGroupingTest {
  private static List<Range> ranges(int partitions, long each) {
    List<Range> out = new ArrayList<>();
    for (int p = 0; p < partitions; p++) {
      out.add(new Range("orders", p, 100, 100 + each));
    }
    return out;
  }

  @Test
  void manyPartitionsGoIntoAtMostTasksGroupsEachPartitionWholeInOne() {
    List<RangeGroup> groups = KafkaRangesSource.group(ranges(1024, 977), 3);
    assertEquals(3, groups.size());
    Set<Integer> seen = new HashSet<>();
    long min = Long.MAX_VALUE;
    long max = 0;
    for (RangeGroup g : groups) {
      long records = 0;
      for (Range r : g.ranges()) {
        assertTrue(seen.add(r.partition()), "partition " + r.partition() + " is in two groups");
        assertEquals(977, r.count());
        records += r.count();
      }
      min = Math.min(min, records);
      max = Math.max(max, records);
    }
    assertEquals(1024, seen.size());
    assertTrue(max - min <= 977, "groups of " + min + " and " + max + " records");
  }

  @Test
  void skewedRangesAreBalancedByRecordsNotByPartitions() {
    List<Range> skewed = new ArrayList<>(ranges(8, 10));
    skewed.add(new Range("orders", 8, 0, 80));
    List<RangeGroup> groups = KafkaRangesSource.group(skewed, 2);
    assertEquals(List.of(new Range("orders", 8, 0, 80)), groups.get(1).ranges());
    assertEquals(8, groups.get(0).ranges().size());
  }

  @Test
  void emptyRangesAreLeftOutAndNoGroupIsEmpty() {
    List<Range> some = new ArrayList<>(ranges(2, 5));
    some.add(new Range("orders", 7, 40, 40));
    List<RangeGroup> groups = KafkaRangesSource.group(some, 8);
    assertEquals(2, groups.size());
    for (RangeGroup g : groups) {
      assertEquals(1, g.ranges().size());
      assertTrue(g.ranges().get(0).partition() < 2);
    }
    assertEquals(List.of(), KafkaRangesSource.group(List.of(new Range("orders", 0, 3, 3)), 4));
  }

  @Test
  void theSamePlanGivesTheSameGroupsInTheSameOrder() {
    assertEquals(KafkaRangesSource.group(ranges(64, 9), 5), KafkaRangesSource.group(ranges(64, 9), 5));
  }

  @Test
  void assignedGroupsAreTheTasksInTheirOrderEvenAnEmptyOne() {
    List<Range> some = new ArrayList<>(ranges(3, 5));
    some.add(new Range("orders", 3, 40, 40)); // empty: read by nobody
    List<RangeGroup> groups = KafkaRangesSource.assigned(some,
        List.of(List.of("orders:2", "orders:0"), List.of("orders:3"), List.of("orders:1")));
    assertEquals(3, groups.size());
    assertEquals(List.of(new Range("orders", 0, 100, 105), new Range("orders", 2, 100, 105)), groups.get(0).ranges());
    assertEquals(List.of(), groups.get(1).ranges()); // its task reads nothing, and still is task 1
    assertEquals(List.of(new Range("orders", 1, 100, 105)), groups.get(2).ranges());
  }

  @Test
  void aRangeNoAssignedGroupNamesIsRefusedByName() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> KafkaRangesSource.assigned(ranges(2, 5), List.of(List.of("orders:0"))));
    assertTrue(e.getMessage().contains("orders:1"), e.getMessage());
  }
}
